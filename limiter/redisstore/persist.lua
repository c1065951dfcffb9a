-- persist.lua follows common.lua in the scripts of the window families
-- (fixed_window.lua, sliding_counter.lua, sliding_log.lua) and in TakeAll's;
-- it is not a script on its own. The bucket script and concurrency.lua go
-- without it: Redis builds every function a script defines on each call.

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
    redis.call('HSET', key, f1, fmt('%d', v1), f2, fmt('%d', v2), f3, fmt('%d', v3))
  elseif f1 then
    redis.call('HSET', key, f1, fmt('%d', v1), f2, fmt('%d', v2))
  end
  redis.call('PEXPIRE', key, fmt('%d', cdiv(reset_us, 1000) + margin_ms))
end
