-- delete.lua removes one principal's override.
--
-- KEYS[1]  the overrides, a HASH: principal key -> the override's JSON
-- KEYS[2]  their expiry, a ZSET: principal key -> until, in ms since the epoch
-- KEYS[3]  the version, an integer INCRed on every change
-- ARGV[1]  the principal key
--
-- Returns 1 when there was an override, else 0.
local n = redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if n > 0 then
  redis.call('INCR', KEYS[3])
end
return n
