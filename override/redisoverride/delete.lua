-- delete.lua removes one principal's override (change.lua before it
-- defines the KEYS, changed and answer).
--
-- ARGV[1]  the principal key
-- ARGV[2]  the id of this change
--
-- Returns {1, count, id} when there was an override, else {0, count, id},
-- with the version the store is at.
local n = redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if n > 0 then
  changed(ARGV[2])
end
return answer(n)
