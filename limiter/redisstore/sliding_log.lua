-- sliding_log.lua: SlidingLog, the mirror of limiter.TakeSlidingLog and
-- limiter.RefundSlidingLog. A unit admitted at t counts against every
-- instant in [t, t + P).
--
-- KEYS[1]  the log, a ZSET. Each admission instant is one member "<t>:<N>"
--          scored t (µs): N units admitted at t. Costs admitted in the same
--          µs merge into one member, so none is lost and a cost of N costs
--          one member, not N. The member "#n" scored -(1 + total units)
--          keeps the total, so counting is O(1); its negative score keeps
--          it first in the set and outside every pruned time range.
-- ARGV[1]  now in µs since the Unix epoch, or '' to read Redis TIME.
-- ARGV[2]  'take' or 'refund'.
-- ARGV[3]  n: the cost (take) or amount (refund), 0 <= n <= 2^53.
-- ARGV[4]  rate: units per trailing period.
-- ARGV[5]  P: the period in µs.
-- ARGV[6]  expiry margin in ms.
--
-- Returns {status, allowed, remaining, retry_us, reset_us, 0}; status 1
-- means the cost exceeds the rate and can never be admitted.
--
-- Cost: O(log size) per call, plus O(1) per entry expired or refunded
-- (each entry leaves once) and, on a rejection, a walk over the oldest
-- entries holding at most the cost's worth of units.

local key = KEYS[1]
local now = clock(ARGV[1])
local op = ARGV[2]
local n = tonumber(ARGV[3])
local rate = tonumber(ARGV[4])
local P = tonumber(ARGV[5])
local margin = tonumber(ARGV[6])

local TOTAL = '#n'
-- Members read per call when walking or pruning: bounds Lua's tables.
local CHUNK = 256

-- units reads N from a member "<t>:<N>".
local function units(member)
  local colon = string.find(member, ':', 1, true)
  return tonumber(string.sub(member, colon + 1))
end

local count = 0
local total = redis.call('ZSCORE', key, TOTAL)
if total then
  count = -tonumber(total) - 1
end

local newestAt, newestMember = 0, nil
local function readNewest()
  local e = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if #e == 2 and e[1] ~= TOTAL then
    newestMember, newestAt = e[1], tonumber(e[2])
  else
    newestMember, newestAt = nil, 0
  end
end
readNewest()
if newestMember then
  -- A clock reading earlier than the newest entry stands at that entry.
  now = math.max(now, math.min(newestAt, MAX_NOW))
end

-- Drop entries with t <= now - P.
local cutoff = now - P
if cutoff >= 0 and newestMember then
  if newestAt <= cutoff then
    redis.call('DEL', key)
    count, newestMember, newestAt = 0, nil, 0
  else
    while true do
      local expired = redis.call('ZRANGEBYSCORE', key, 0, int(cutoff), 'LIMIT', 0, CHUNK)
      if #expired == 0 then break end
      for _, m in ipairs(expired) do
        count = count - units(m)
      end
      redis.call('ZREM', key, unpack(expired))
      if #expired < CHUNK then break end
    end
  end
end
count = math.max(0, count)

local function finish(status, allowed, retry)
  local reset = 0
  if count > 0 then
    reset = newestAt + P - now
    redis.call('ZADD', key, int(-(1 + count)), TOTAL)
  end
  persist(key, nil, reset, margin)
  return {status, allowed, math.max(0, rate - count), retry, reset, 0}
end

if op == 'refund' then
  -- Remove the n newest units (the refunded request most likely added them).
  if n >= count then
    redis.call('DEL', key)
    count, newestMember, newestAt = 0, nil, 0
  else
    local left = n
    while left > 0 and newestMember do
      local N = units(newestMember)
      redis.call('ZREM', key, newestMember)
      if N > left then
        redis.call('ZADD', key, int(newestAt), int(newestAt) .. ':' .. int(N - left))
        count = count - left
        left = 0
      else
        count = count - N
        left = left - N
      end
      readNewest()
    end
  end
  return finish(0, 1, 0)
end

if n > rate then
  return finish(1, 0, 0)
end
if n > rate - count then
  -- Exactly enough room is free once the k-th oldest unit has left.
  local k = count + n - rate
  local start = 1 -- rank 0 is TOTAL
  while true do
    local batch = redis.call('ZRANGE', key, start, start + CHUNK - 1, 'WITHSCORES')
    for i = 1, #batch, 2 do
      k = k - units(batch[i])
      if k <= 0 then
        return finish(0, 0, tonumber(batch[i + 1]) + P - now)
      end
    end
    if #batch < 2 * CHUNK then break end
    start = start + CHUNK
  end
  return finish(0, 0, P) -- unreachable while TOTAL matches the entries
end
if n > 0 then
  local N = n
  if newestMember and newestAt == now then
    N = N + units(newestMember)
    redis.call('ZREM', key, newestMember)
  end
  redis.call('ZADD', key, int(now), int(now) .. ':' .. int(N))
  count = count + n
  newestAt = now
end
return finish(0, 1, 0)
