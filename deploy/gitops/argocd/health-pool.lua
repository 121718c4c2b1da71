-- Argo CD health of a gem.dev RankingService or SolarisPrecompute (replica pools), from the status
-- the gem-operator writes. Healthy: the desired replicas are ready, or the pool is scaled to zero on
-- purpose. Degraded: rejected (InvalidSpec). Otherwise Progressing: not yet observed or replicas
-- starting. Scaling trouble (MetricsUnavailable, ScalingLimited) is reported in the message: the pool
-- still serves while the autoscaler holds.
local hs = {status = "Progressing", message = "Waiting for the gem-operator to report status"}

local function condition(status, type)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == type then
      return c
    end
  end
  return nil
end

local function message_of(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return fallback
end

local status = obj.status
if status == nil then
  return hs
end
local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.message = "Waiting for the gem-operator to observe generation " .. tostring(generation)
  return hs
end

local phase = status.phase
local ready = condition(status, "Ready")
local notes = {}
local metrics = condition(status, "MetricsUnavailable")
if metrics ~= nil and metrics.status == "True" then
  table.insert(notes, "autoscaler holding: " .. message_of(metrics, "metrics unavailable"))
end
local limited = condition(status, "ScalingLimited")
if limited ~= nil and limited.status == "True" then
  table.insert(notes, "scaling limited: " .. message_of(limited, limited.reason or "at a bound"))
end

local function with_notes(message)
  if #notes == 0 then
    return message
  end
  return message .. " (" .. table.concat(notes, "; ") .. ")"
end

if phase == "Invalid" or (ready ~= nil and ready.reason == "InvalidSpec") then
  hs.status = "Degraded"
  hs.message = "Invalid spec: " .. message_of(ready, "see the Ready condition")
elseif phase == "ScaledToZero" then
  hs.status = "Healthy"
  hs.message = with_notes("Scaled to zero: no replicas wanted")
elseif phase == "Ready" and ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = with_notes(message_of(ready, "replicas ready"))
else
  hs.message = with_notes(message_of(ready, "Phase " .. tostring(phase)))
end
return hs
