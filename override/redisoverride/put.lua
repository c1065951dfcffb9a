-- put.lua sets one principal's override, after removing the expired ones
-- (change.lua before it defines the KEYS, purge, changed and answer).
--
-- ARGV[1]  the principal key
-- ARGV[2]  the override's JSON
-- ARGV[3]  until in ms since the epoch, 0 for none
-- ARGV[4]  now in ms since the epoch (the caller's clock judges expiry)
-- ARGV[5]  the most overrides the hash may hold
-- ARGV[6]  the id of this change
--
-- Returns {1, count, id} with the version it left, or {-1, count, id}
-- when the hash is full and the principal has no override.
purge(ARGV[4], ARGV[6])
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and count() >= tonumber(ARGV[5]) then
  return answer(-1)
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if tonumber(ARGV[3]) > 0 then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
else
  redis.call('ZREM', KEYS[2], ARGV[1])
end
changed(ARGV[6])
return answer(1)
