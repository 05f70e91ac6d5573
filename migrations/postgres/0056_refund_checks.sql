SET LOCAL lock_timeout = '5s';
-- Refunds checked on chain (issue 36): a refund's transaction is followed
-- by the watcher of the network the money came on. Its destination is
-- watched from `refund_required` on; the rows recorded for the refund's
-- txid paying it are its evidence, final by that network's rule and
-- taken back by a reorg like any other row.
--
-- state: `required` (no transaction yet), `sent_unconfirmed` (recorded,
-- not yet final paying the destination at least what is owed),
-- `refunded` (final), `mismatch` (final but wrong: reverted, too little,
-- another asset or destination; or not seen by `check_by`), `unchecked`
-- (sent before paywatch checked refunds: never judged).
ALTER TABLE refunds ADD COLUMN network TEXT;
ALTER TABLE refunds ADD COLUMN state TEXT;
ALTER TABLE refunds ADD COLUMN check_by BIGINT;
ALTER TABLE refunds ADD COLUMN checked_at BIGINT;
ALTER TABLE refunds ADD COLUMN mismatch TEXT;

UPDATE refunds SET
    state = CASE WHEN txid IS NULL THEN 'required' ELSE 'unchecked' END,
    network = (SELECT CASE WHEN i.exception = 'wrong_network' AND i.network = 'ethereum' THEN 'tron'
                           WHEN i.exception = 'wrong_network' AND i.network = 'tron' THEN 'ethereum'
                           ELSE i.network END
               FROM intents i WHERE i.id = refunds.intent_id);

-- Compared with what the watcher records: Ethereum addresses were kept as
-- pasted (checksum capitals), where transfers are lower-case.
UPDATE refunds SET destination = lower(destination) WHERE network = 'ethereum';

CREATE OR REPLACE VIEW paywatch_intents AS
SELECT i.id AS intent_id, i.kind, i.reference, i.account, i.asset, i.network, i.address,
       i.decimals, i.amount_due, i.usd_cents, i.rate_usd, i.rate_source, i.rate_at,
       i.status, i.exception, i.reason,
       i.amount_final AS amount_received_final,
       i.amount_pending AS amount_received_pending,
       i.amount_excess,
       i.created_at, i.expires_at,
       CASE WHEN i.reversed_at IS NULL THEN i.paid_at END AS paid_at, i.reversed_at, i.declared_paid_at, i.updated_at,
       i.outcome,
       COALESCE(i.amount_short, i.amount_due) AS amount_outstanding,
       CASE WHEN COALESCE(i.amount_short, i.amount_due) = 0 THEN 1 ELSE 0 END AS received_in_full,
       COALESCE(i.reason_code,
                CASE WHEN i.status = 'awaiting_payment' THEN 'awaiting_payment' END) AS reason_code,
       CASE WHEN r.intent_id IS NULL THEN NULL
            WHEN r.sent_at IS NULL THEN 'required' ELSE 'sent' END AS refund_status,
       r.destination AS refund_destination, r.txid AS refund_txid,
       r.required_at AS refund_required_at, r.sent_at AS refund_sent_at,
       i.amount_final AS amount_final, i.amount_pending AS amount_pending,
       i.created_at AS created_at_ms, i.expires_at AS expires_at_ms,
       CASE WHEN i.reversed_at IS NULL THEN i.paid_at END AS paid_at_ms,
       i.reversed_at AS reversed_at_ms, i.declared_paid_at AS declared_paid_at_ms,
       i.updated_at AS updated_at_ms,
       r.state AS refund_state, r.network AS refund_network,
       r.check_by AS refund_check_by_ms, r.checked_at AS refund_checked_at_ms,
       r.mismatch AS refund_mismatch
FROM intents i
LEFT JOIN refunds r ON r.intent_id = i.id;
