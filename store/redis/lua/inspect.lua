-- Returns KEYS[1]'s raw state for store.Inspector: {'string', value},
-- {'zset', member1, score1, ...} or {'none'}.
local t = redis.call('TYPE', KEYS[1]).ok
if t == 'string' then
  return { t, redis.call('GET', KEYS[1]) }
elseif t == 'zset' then
  local r = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
  table.insert(r, 1, t)
  return r
end
return { t }
