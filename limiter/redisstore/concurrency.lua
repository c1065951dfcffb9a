-- concurrency.lua: one principal's concurrency slots (package
-- limiter/concurrency), run after common.lua. One call is one Acquire,
-- Release or Refresh, atomic like every script.
--
-- KEYS[1]  the principal's leases, a ZSET: member = lease id (32 hex
--          digits), score = its expiry in µs since the Unix epoch.
-- ARGV[1]  op: 'acquire', 'release' or 'refresh'.
-- ARGV[2]  now in µs since the Unix epoch, or '' to read Redis TIME
--          (production always passes '').
-- ARGV[3]  expiry margin in ms.
-- ARGV[4]  the lease id.
-- ARGV[5]  ttl in µs (acquire, refresh; '' for release), at most a day.
-- ARGV[6]  limit (acquire; '' otherwise), at most 2^16.
--
-- Returns, for acquire, {allowed, held, retry_us}: allowed 1 or 0; held,
-- the unexpired leases after the call; retry_us, for a refusal, the time
-- until the earliest lease expires (0 when allowed). For release and
-- refresh, {held}: 1 when the lease was held, unexpired, before the call.
--
-- A lease is held while now < its score. Acquire first deletes the
-- expired members, then counts; release and refresh treat an expired
-- member as gone. Acquire is idempotent per lease id: run again with the
-- same id (a client's retry after the reply was lost), it finds its lease
-- and grants it again without taking a second slot. Every write sets the
-- key to vanish margin ms after its latest lease expires; Redis deletes
-- the key with its last member.

local key, op = KEYS[1], ARGV[1]
local now = now_us(ARGV[2])
local margin = tonumber(ARGV[3])
local id = ARGV[4]

if op == 'release' then
  local score = redis.call('ZSCORE', key, id)
  if not score then
    return {0}
  end
  redis.call('ZREM', key, id)
  if tonumber(score) > now then
    return {1}
  end
  return {0}
end

local ttl = tonumber(ARGV[5])
local held

if op == 'refresh' then
  local score = redis.call('ZSCORE', key, id)
  if not score then
    return {0}
  end
  if tonumber(score) <= now then
    -- Expired: its slot may have been counted free already.
    redis.call('ZREM', key, id)
    return {0}
  end
  redis.call('ZADD', key, 'XX', fmt('%d', now + ttl), id)
elseif op == 'acquire' then
  redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt('%d', now))
  held = redis.call('ZCARD', key)
  if redis.call('ZSCORE', key, id) then
    return {1, held, 0} -- this id's call ran before
  end
  if held >= tonumber(ARGV[6]) then
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    return {0, held, tonumber(first[2]) - now}
  end
  redis.call('ZADD', key, fmt('%d', now + ttl), id)
  held = held + 1
else
  return redis.error_reply('costguard: unknown concurrency op ' .. tostring(op))
end

local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', key, fmt('%d', cdiv(tonumber(last[2]) - now, 1000) + margin))
if held then
  return {1, held, 0}
end
return {1}
