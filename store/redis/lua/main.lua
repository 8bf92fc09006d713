-- The entry point. ARGV: the number of groups; the TTL floor (ms) for
-- groups with an explicit time; the number of limits, then each limit's
-- kind and params; then for each group its op, its time (µs; '' for the
-- server's TIME) and its number of requests, and for each request: the
-- limit's index (1-based), cost, lease (a decimal id, kept as a string),
-- at (the time of the take being refunded, for refund and rollback; ''
-- for the group's time). KEYS: the requests' keys in the same order.
--
-- Ops: 't' take (all or nothing over the group), 'T' reserve (a take that
-- also reports, per request, the time its units were stamped with, for
-- the rollback), 'p' peek (writes nothing), 'r' refund, 'b' rollback (undo
-- a reservation, including a concurrency lease's slots), 'l' release,
-- 'n' renew (a concurrency lease's slots expire the lease TTL from now).
--
-- The reply, per group: status (take: 1 if admitted; others: 1), the time
-- used, then per request for take and peek: allowed (0/1), remaining,
-- retry-after (µs, -1 for never), reset-after (µs), delay (µs) (and for
-- reserve the stamp time); for release and renew: 1 if the lease held
-- slots; for
-- refund and rollback: nothing.
--
-- States follow store/storetest's reference: a state whose ExpiresAt has
-- passed reads as fresh (refund, release and renew leave it alone); a refused
-- take charges nothing and leaves each state as that request alone would
-- (a peek if it would pass, a refused take if not).

local servertime
local function clock()
  if not servertime then
    local t = rcall('TIME')
    servertime = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return servertime
end

local function copystate(st)
  local c = {}
  for k, v in pairs(st) do c[k] = v end
  if st.ring then
    c.ring = {}
    for k, v in pairs(st.ring) do c.ring[k] = v end
  end
  return c
end

local function restore(st, snap)
  for k, v in pairs(snap) do st[k] = v end
end

local out, o = {}, 0
local function emit(v)
  o = o + 1
  out[o] = v
end

-- put emits a decision (the first five of decide's results) and returns
-- whether it admitted.
local function put(allowed, rem, retry, reset, delay)
  out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = allowed, rem, retry, reset, delay
  o = o + 5
  return allowed
end

local testTTL = tonumber(ARGV[2]) or 0
local specs, ai = {}, 4
for i = 1, tonumber(ARGV[3]) do
  local h = handler(tonumber(ARGV[ai]))
  if not h then return redis.error_reply('floodgate: unknown algorithm ' .. tostring(ARGV[ai])) end
  local p = h.parse(ARGV, ai + 1)
  p.kind = tonumber(ARGV[ai])
  specs[i] = { h = h, p = p }
  ai = ai + 1 + h.np
end

local ki = 1
for _ = 1, tonumber(ARGV[1]) do
  local op, tnow = ARGV[ai], ARGV[ai + 1]
  local nreq = tonumber(ARGV[ai + 2])
  ai = ai + 3
  local now
  if tnow == '' then
    now, minTTL = clock(), 0
  else
    now, minTTL = clamp(tonumber(tnow)), testTTL
  end

  if op == 't' and nreq == 1 then
    -- The common case, kept free of bookkeeping.
    local sp = specs[tonumber(ARGV[ai])]
    local h, p = sp.h, sp.p
    local base = o
    o = o + 2
    local st = h.load(KEYS[ki], p, false)
    if h.expires(st, p) <= now then h.fresh(st) end
    out[base + 1] = put(h.decide(st, p, now, tonumber(ARGV[ai + 1]), ARGV[ai + 2], true))
    h.save(st, p, now)
    out[base + 2] = now
    ai, ki = ai + 4, ki + 1
  else
    -- Parse the group; requests on the same key share one state.
    local ro = op == 'p'
    local reqs, states, order = {}, {}, {}
    for r = 1, nreq do
      local sp = specs[tonumber(ARGV[ai])]
      local h, p = sp.h, sp.p
      local key = KEYS[ki]
      local sk = ARGV[ai] .. ':' .. key
      local st = states[sk]
      if not st then
        st = h.load(key, p, ro, op == 'r' or op == 'l' or op == 'n')
        if h.expires(st, p) <= now then
          if op == 't' or op == 'T' or op == 'p' then
            h.fresh(st)
          else
            st.expired = true -- refund, release and renew leave it alone
          end
        end
        states[sk] = st
        if not st.expired then order[#order + 1] = { h = h, st = st, p = p } end
      end
      reqs[r] = { h = h, p = p, st = st, cost = tonumber(ARGV[ai + 1]), lease = ARGV[ai + 2], at = ARGV[ai + 3] }
      ai, ki = ai + 4, ki + 1
    end

    if op == 't' or op == 'T' then
      local ds, ok = {}, true
      -- Decide every request alone first, charging nothing.
      for r = 1, nreq do
        local q = reqs[r]
        ds[r] = { q.h.decide(q.st, q.p, now, q.cost, q.lease, nreq == 1) }
        if ds[r][1] ~= 1 then
          ok = false
          if nreq > 1 then ds[r] = { q.h.decide(q.st, q.p, now, q.cost, q.lease, true) } end
        end
      end
      if ok and nreq > 1 then
        -- All pass alone: charge them in order.
        local snaps = {}
        for i = 1, #order do snaps[i] = copystate(order[i].st) end
        local charged, d2 = {}, {}
        for r = 1, nreq do
          local q = reqs[r]
          local d = { q.h.decide(q.st, q.p, now, q.cost, q.lease, true) }
          d2[r] = d
          if d[1] ~= 1 then
            -- Only a key named twice can get here: undo the charges
            -- (sorted sets by rollback, strings by their snapshots) and
            -- report each request alone.
            ok = false
            for j = #charged, 1, -1 do
              local c = reqs[charged[j]]
              if c.h.rollback then c.h.rollback(c.st, c.p, now, d2[charged[j]][6], c.cost, c.lease) end
            end
            for i = 1, #order do restore(order[i].st, snaps[i]) end
            break
          end
          charged[#charged + 1] = r
        end
        if ok then ds = d2 end
      end
      for i = 1, #order do order[i].h.save(order[i].st, order[i].p, now) end
      emit(ok and 1 or 0)
      emit(now)
      for r = 1, nreq do
        local d = ds[r]
        put(d[1], d[2], d[3], d[4], d[5])
        if op == 'T' then emit(d[6]) end
      end
    elseif op == 'p' then
      emit(1)
      emit(now)
      for r = 1, nreq do
        local q = reqs[r]
        put(q.h.decide(q.st, q.p, now, q.cost, q.lease, false))
      end
    elseif op == 'r' or op == 'b' then
      for r = 1, nreq do
        local q = reqs[r]
        local at = now
        if q.at ~= '' then at = clamp(tonumber(q.at)) end
        if q.st.expired then
          -- Nothing left to give back.
        elseif op == 'b' and q.h.rollback then
          q.h.rollback(q.st, q.p, now, at, q.cost, q.lease)
        elseif q.cost > 0 then
          q.h.refund(q.st, q.p, now, at, q.cost)
        end
      end
      for i = 1, #order do order[i].h.save(order[i].st, order[i].p, now) end
      emit(1)
      emit(now)
    elseif op == 'l' or op == 'n' then
      -- Release or renew: the handler's function of that name, for the
      -- algorithms that have one (concurrency).
      local fn = op == 'l' and 'release' or 'renew'
      emit(1)
      emit(now)
      for r = 1, nreq do
        local q = reqs[r]
        local found = false
        if q.h[fn] and not q.st.expired then found = q.h[fn](q.st, q.p, now, q.lease) end
        emit(found and 1 or 0)
      end
      for i = 1, #order do
        if order[i].h[fn] then order[i].h.save(order[i].st, order[i].p, now) end
      end
    else
      return redis.error_reply('floodgate: unknown op ' .. tostring(op))
    end
  end
end
return out
