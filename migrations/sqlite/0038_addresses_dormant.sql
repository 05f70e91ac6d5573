-- The sweep pages through a network's dormant addresses in id order.
CREATE INDEX IF NOT EXISTS addresses_dormant ON addresses (network, id) WHERE dormant_at IS NOT NULL;
