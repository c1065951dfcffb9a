-- expire.lua defines purge, which removes the overrides whose until has
-- passed; it opens put.lua and purge.lua (concatenated in
-- redisoverride.go), whose KEYS it shares:
--
-- KEYS[1]  the overrides, a HASH: principal key -> the override's JSON
-- KEYS[2]  their expiry, a ZSET: principal key -> until, in ms since the epoch
-- KEYS[3]  the version, an integer INCRed on every change
--
-- now is in ms since the epoch (the caller's clock judges expiry). Returns
-- how many were removed; the version moves when any was.
local function purge(now)
  local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
  for _, k in ipairs(expired) do
    redis.call('HDEL', KEYS[1], k)
    redis.call('ZREM', KEYS[2], k)
  end
  if #expired > 0 then
    redis.call('INCR', KEYS[3])
  end
  return #expired
end
