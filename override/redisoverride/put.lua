-- put.lua sets one principal's override, after removing the expired ones
-- (expire.lua before it defines purge).
--
-- KEYS[1]  the overrides, a HASH: principal key -> the override's JSON
-- KEYS[2]  their expiry, a ZSET: principal key -> until, in ms since the epoch
--          (only the overrides that have an until)
-- KEYS[3]  the version, an integer INCRed on every change
-- ARGV[1]  the principal key
-- ARGV[2]  the override's JSON
-- ARGV[3]  until in ms since the epoch, 0 for none
-- ARGV[4]  now in ms since the epoch (the caller's clock judges expiry)
-- ARGV[5]  the most overrides the hash may hold
--
-- Returns the new version, or -1 when the hash is full and the principal
-- has no override.
purge(ARGV[4])
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[5]) then
  return -1
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if tonumber(ARGV[3]) > 0 then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
else
  redis.call('ZREM', KEYS[2], ARGV[1])
end
return redis.call('INCR', KEYS[3])
