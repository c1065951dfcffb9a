-- Adds one process's recorded list sizes to the hash every process shares.
--
-- KEYS[1]  the hash: "<field coordinate>:<counter>" -> integer
-- ARGV[1]  the hash's time to live, in milliseconds, renewed by each call
-- ARGV[2]  n, the number of (hash field, delta) pairs added with HINCRBY
-- ARGV[3]  m, the number of (hash field, value) pairs raised to value when
--          below it (the largest lists)
-- ARGV[4…] the n pairs, then the m pairs, then (hash field, value) pairs set
--          as they are (the sizes last assumed)
local key = KEYS[1]
local n, m = tonumber(ARGV[2]), tonumber(ARGV[3])
local i = 4
for _ = 1, n do
  redis.call('HINCRBY', key, ARGV[i], ARGV[i + 1])
  i = i + 2
end
for _ = 1, m do
  local v = tonumber(ARGV[i + 1])
  local cur = tonumber(redis.call('HGET', key, ARGV[i]) or '-1')
  if v > cur then
    redis.call('HSET', key, ARGV[i], ARGV[i + 1])
  end
  i = i + 2
end
while i < #ARGV do
  redis.call('HSET', key, ARGV[i], ARGV[i + 1])
  i = i + 2
end
redis.call('PEXPIRE', key, ARGV[1])
return 0
