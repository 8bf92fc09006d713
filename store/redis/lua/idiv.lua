-- idiv returns floor(a / b) for integers a, b (b > 0), exact below 2^53:
-- the double quotient can round across an integer, so it is corrected.
-- Included ("--#include idiv.lua") by every script; needs the local floor.
local function idiv(a, b)
  local q = floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end
