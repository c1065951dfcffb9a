-- common.lua is prepended to every costguard script; it is not a script on
-- its own. Redis Lua numbers are doubles: integers are exact below 2^53, and
-- limiter.Limit.Validate bounds every value these scripts form below that.
-- Each helper mirrors an integer helper of package limiter.

-- MAX_NOW is limiter.MaxNow (2^52 - 1 µs, early 2112).
local MAX_NOW = 4503599627370495

-- idiv is floor(a / b) for 0 <= a < 2^53 and b > 0. The rounded double
-- quotient can land on the next integer when the true one lies just below
-- it; one step corrects that. The comparisons are sound: a is exact, and a
-- product that rounds (only above 2^53) is then larger than a either way.
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

-- cdiv is ceil(a / b) for 0 <= a < 2^53 and b > 0, without forming a + b.
local function cdiv(a, b)
  local q = idiv(a, b)
  if q * b < a then
    q = q + 1
  end
  return q
end

local function clamp(v, lo, hi)
  if v < lo then return lo end
  if v > hi then return hi end
  return v
end

-- int formats an integer for a Redis argument. A bare Lua number would be
-- sent in %.17g or shortest form, which may use an exponent.
local function int(v)
  return string.format('%d', v)
end

-- clock returns now in µs since the Unix epoch, clamped to [0, MAX_NOW]:
-- Redis TIME when arg is empty (production), else arg (tests pin time).
local function clock(arg)
  local now
  if arg == '' then
    -- Redis < 5 replicates scripts verbatim unless told to replicate their
    -- effects, and would refuse a write after TIME; later versions ignore this.
    if redis.replicate_commands then redis.replicate_commands() end
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  else
    now = tonumber(arg)
  end
  return clamp(now, 0, MAX_NOW)
end

-- persist ends every decision the way the memory store does: a budget
-- that is whole again (reset_us = 0) decides exactly like an absent key, so
-- the key is deleted; otherwise the HASH fields f1..f3 (a field name, then
-- its integer value; f3, or all three, nil when unused, as for SlidingLog,
-- whose ZSET is updated in place) are written and the key is set to vanish
-- margin_ms after the budget will be whole.
local function persist(key, reset_us, margin_ms, f1, v1, f2, v2, f3, v3)
  if reset_us <= 0 then
    redis.call('DEL', key)
    return
  end
  if f3 then
    redis.call('HSET', key, f1, int(v1), f2, int(v2), f3, int(v3))
  elseif f1 then
    redis.call('HSET', key, f1, int(v1), f2, int(v2))
  end
  redis.call('PEXPIRE', key, int(cdiv(reset_us, 1000) + margin_ms))
end

-- num reads a stored integer; an absent field is 0, like a fresh state.
local function num(v)
  return tonumber(v) or 0
end

-- reply writes one key's decision to out[at + 1 .. at + 6], the script's
-- flat reply (see batch.lua).
local function reply(out, at, status, allowed, remaining, retry_us, reset_us, delay_us)
  out[at + 1], out[at + 2], out[at + 3] = status, allowed, remaining
  out[at + 4], out[at + 5], out[at + 6] = retry_us, reset_us, delay_us
end

-- failed writes the reply of a key that cannot be decided when r, the
-- result of redis.pcall, is an error: status 2 and Redis's message. Each
-- algorithm reads its key with redis.pcall before it writes anything, so a
-- key holding another type (WRONGTYPE) fails alone and is left as it was,
-- and the other keys of the call are decided all the same. (A Lua pcall
-- around each decision would do the same at several times the cost.)
local function failed(out, at, r)
  if type(r) == 'table' and r.err then
    reply(out, at, 2, r.err, 0, 0, 0, 0)
    return true
  end
  return false
end
