-- paywatch: no-transaction
-- Refunds sent and still unconfirmed, by deadline: every reconcile pass
-- asks which are past theirs.
CREATE INDEX CONCURRENTLY IF NOT EXISTS refunds_due ON refunds (check_by) WHERE state = 'sent_unconfirmed';
