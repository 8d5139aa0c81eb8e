-- Dead alarms listed across objects, by type, id and name (an operator's view of every alarm
-- that exhausted its attempts): the partial index holds only dead alarms, in that order, so a
-- page of them reads no live alarm.
CREATE INDEX {index_prefix}durable_alarms_dead ON {prefix}durable_alarms
    (object_type, object_id, name) WHERE dead = 1;
