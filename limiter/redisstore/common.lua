-- common.lua opens every costguard script; it is not a script on its own.
-- Redis Lua numbers are doubles: integers are exact below 2^53, and
-- limiter.Limit.Validate bounds every value these scripts form below that.
-- Each helper mirrors an integer helper of package limiter.
--
-- Redis runs a script's top level on every call, so each function defined
-- here or in an algorithm file is a closure built per call: the scripts
-- keep to the few that carry real arithmetic and write small steps inline.

-- MAX_NOW is limiter.MaxNow (2^52 - 1 µs, early 2112).
local MAX_NOW = 4503599627370495

-- The op of a decision, as batch.lua reads it. DRY (multi.lua only)
-- decides as TAKE does and reports the same, but writes nothing the take
-- would change: a budget's key is left as it was, or (SlidingLog) only
-- rid of expired entries, which decides the same.
local TAKE, REFUND, DRY = 0, 1, 2

-- now_us is a call's time in µs since the Unix epoch, clamped to
-- [0, MAX_NOW]: arg, a script argument in µs, or Redis TIME when arg is ''
-- (production always passes '').
local function now_us(arg)
  local now
  if arg == '' then
    -- Redis < 5 replicates scripts verbatim unless told to replicate their
    -- effects, and would refuse a write after TIME; later versions ignore this.
    if redis.replicate_commands then redis.replicate_commands() end
    -- Arithmetic converts TIME's two strings with one strtod each;
    -- tonumber would run two (Lua 5.1 checks the string, then converts it).
    local t = redis.call('TIME')
    now = t[1] * 1000000 + t[2]
  else
    now = tonumber(arg)
  end
  if now < 0 then return 0 elseif now > MAX_NOW then return MAX_NOW end
  return now
end

-- fmt formats an integer for a Redis argument with '%d': a bare Lua number
-- would be sent in %.17g or shortest form, which may use an exponent.
local fmt = string.format

-- idiv is floor(a / b) for 0 <= a < 2^53 and b > 0. The rounded double
-- quotient can land on the next integer when the true one lies just below
-- it; one step corrects that. The comparisons are sound: a is exact, and a
-- product that rounds (only above 2^53) is then larger than a either way.
-- math.floor is looked up where it is called: a top-level local would be an
-- upvalue, allocated and collected on every script call, which costs more
-- than the two lookups.
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

-- cdiv is ceil(a / b) for 0 <= a < 2^53 and b > 0, without forming a + b:
-- idiv's floor, then one step up. idiv is written out rather than called,
-- as a Lua call costs Redis more than the arithmetic.
local function cdiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  if q * b < a then
    q = q + 1
  end
  return q
end
