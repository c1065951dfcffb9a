-- change.lua opens every script of the store (concatenated in
-- redisoverride.go), whose KEYS it shares:
--
-- KEYS[1]  the overrides, a HASH: principal key -> the override's JSON,
--          and the field CHANGE -> the id of the last change
-- KEYS[2]  their expiry, a ZSET: principal key -> until, in ms since the epoch
-- KEYS[3]  the count of changes, an integer INCRed on every change
--
-- The version is {count, id}. Every change draws a new id (the caller
-- passes it) and keeps it in the hash itself, so that whatever loses the
-- overrides (FLUSHALL, a restart without persistence, a replica promoted
-- before it received the last changes, eviction) loses the id with them:
-- counting back to a count already seen never gives a version already
-- seen.
local CHANGE = '#change'

-- version returns {count, id}; {0, ''} for a store never changed.
local function version()
  return {tonumber(redis.call('GET', KEYS[3]) or '0'), redis.call('HGET', KEYS[1], CHANGE) or ''}
end

-- changed records a change of id.
local function changed(id)
  redis.call('HSET', KEYS[1], CHANGE, id)
  redis.call('INCR', KEYS[3])
end

-- count returns how many overrides the hash holds.
local function count()
  return redis.call('HLEN', KEYS[1]) - redis.call('HEXISTS', KEYS[1], CHANGE)
end

-- purge removes the overrides whose until has passed at now (ms since the
-- epoch; the caller's clock judges expiry), as a change of id when any
-- was. Returns how many were removed.
local function purge(now, id)
  local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
  for _, k in ipairs(expired) do
    redis.call('HDEL', KEYS[1], k)
    redis.call('ZREM', KEYS[2], k)
  end
  if #expired > 0 then
    changed(id)
  end
  return #expired
end

-- answer returns {result, count, id}: what a change script returns.
local function answer(result)
  local v = version()
  return {result, v[1], v[2]}
end
