-- sliding_log.lua: SlidingLog, the mirror of limiter.TakeSlidingLog and
-- limiter.RefundSlidingLog. A unit admitted at t counts against every
-- instant in [t, t + P). It defines decide, called by batch.lua for each of
-- its keys.
--
-- key      the log, a ZSET. Each admission instant is one member "<t>:<N>"
--          scored t (µs): N units admitted at t. Costs admitted in the same
--          µs merge into one member, so none is lost and a cost of N costs
--          one member, not N. The member "#n" scored -(1 + total units)
--          keeps the total, so counting is O(1); its negative score keeps
--          it first in the set and outside every pruned time range.
-- now      µs since the Unix epoch, already clamped (see batch.lua).
-- alg      the limiter.Algorithm value (unused).
-- op       TAKE, REFUND or DRY (a TAKE that writes only the pruning of
--          expired entries, and reports the take).
-- n        the cost (take) or amount (refund), 0 <= n <= 2^53.
-- rate     units per trailing period.
-- P        the period in µs.
-- c        unused.
-- margin   expiry margin in ms.
--
-- Returns status, allowed, remaining, retry_us, reset_us, 0; status 1
-- means the cost exceeds the rate and can never be admitted, status 2 that
-- the key could not be read, with Redis's message as allowed (see batch.lua).
--
-- Cost: O(log size) per call, plus O(1) per entry expired or refunded
-- (each entry leaves once) and, on a rejection, a walk over the oldest
-- entries holding at most the cost's worth of units.

local LOG_TOTAL = '#n'
-- Members read per call when walking or pruning: bounds Lua's tables.
local LOG_CHUNK = 256

-- log_units reads N from a member "<t>:<N>".
local function log_units(member)
  local colon = string.find(member, ':', 1, true)
  return tonumber(string.sub(member, colon + 1))
end

-- log_newest returns the newest entry of the log at key, member and time,
-- or nil and 0 when it has none.
local function log_newest(key)
  local e = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if #e == 2 and e[1] ~= LOG_TOTAL then
    return e[1], tonumber(e[2])
  end
  return nil, 0
end

-- log_retry is how long until the log holding count units admits cost n:
-- exactly enough room is free once the k-th oldest unit has left.
local function log_retry(key, now, n, rate, P, count)
  local k = count + n - rate
  local start = 1 -- rank 0 is LOG_TOTAL
  while true do
    local batch = redis.call('ZRANGE', key, start, start + LOG_CHUNK - 1, 'WITHSCORES')
    for i = 1, #batch, 2 do
      k = k - log_units(batch[i])
      if k <= 0 then
        return tonumber(batch[i + 1]) + P - now
      end
    end
    if #batch < 2 * LOG_CHUNK then break end
    start = start + LOG_CHUNK
  end
  return P -- unreachable while LOG_TOTAL matches the entries
end

local function decide(key, now, alg, op, n, rate, P, c, margin)
  local total = redis.pcall('ZSCORE', key, LOG_TOTAL)
  if type(total) == 'table' then
    return 2, total.err, 0, 0, 0, 0
  end
  local count = 0
  if total then
    count = -tonumber(total) - 1
  end

  local newestMember, newestAt = log_newest(key)
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
        local expired = redis.call('ZRANGEBYSCORE', key, 0, fmt('%d', cutoff), 'LIMIT', 0, LOG_CHUNK)
        if #expired == 0 then break end
        for _, m in ipairs(expired) do
          count = count - log_units(m)
        end
        redis.call('ZREM', key, unpack(expired))
        if #expired < LOG_CHUNK then break end
      end
    end
  end
  count = math.max(0, count)
  -- What the key holds once pruned: a DRY admission writes only that.
  local kept, keptAt = count, newestAt

  local status, allowed, retry = 0, 1, 0
  if op == REFUND then
    -- Remove the n newest units (the refunded request most likely added them).
    if n >= count then
      redis.call('DEL', key)
      count, newestMember, newestAt = 0, nil, 0
    else
      local left = n
      while left > 0 and newestMember do
        local N = log_units(newestMember)
        redis.call('ZREM', key, newestMember)
        if N > left then
          redis.call('ZADD', key, fmt('%d', newestAt), fmt('%d', newestAt) .. ':' .. fmt('%d', N - left))
          count = count - left
          left = 0
        else
          count = count - N
          left = left - N
        end
        newestMember, newestAt = log_newest(key)
      end
    end
  elseif n > rate then
    status, allowed = 1, 0
  elseif n > rate - count then
    allowed, retry = 0, log_retry(key, now, n, rate, P, count)
  elseif n > 0 then
    if op ~= DRY then
      local N = n
      if newestMember and newestAt == now then
        N = N + log_units(newestMember)
        redis.call('ZREM', key, newestMember)
      end
      redis.call('ZADD', key, fmt('%d', now), fmt('%d', now) .. ':' .. fmt('%d', N))
    end
    count = count + n
    newestAt = now
  end
  if op ~= DRY then
    kept, keptAt = count, newestAt
  end

  local reset = 0
  if count > 0 then
    reset = newestAt + P - now
  end
  local keep = 0
  if kept > 0 then
    keep = keptAt + P - now
    redis.call('ZADD', key, fmt('%d', -(1 + kept)), LOG_TOTAL)
  end
  persist(key, keep, margin)
  return status, allowed, math.max(0, rate - count),
    retry, reset, 0
end
