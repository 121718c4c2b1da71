-- Argo CD health of a gem.dev GEMTraining, from the status the gem-operator writes.
-- Healthy: the whole gang is Running (or training Succeeded). Suspended: spec.suspend (e.g. waiting
-- for Kueue). Degraded: rejected (InvalidSpec) or Failed (restart budget spent). Otherwise
-- Progressing: not yet observed, being placed, pods starting, or restarting from a checkpoint.
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
local failed = condition(status, "Failed")
local suspended = condition(status, "Suspended")
local placed = condition(status, "Placed")

if phase == "Invalid" or (ready ~= nil and ready.reason == "InvalidSpec") then
  hs.status = "Degraded"
  hs.message = "Invalid spec: " .. message_of(ready, "see the Ready condition")
elseif phase == "Failed" or (failed ~= nil and failed.status == "True") then
  hs.status = "Degraded"
  hs.message = message_of(failed, message_of(ready, "training failed"))
elseif phase == "Suspended" or (suspended ~= nil and suspended.status == "True") then
  hs.status = "Suspended"
  hs.message = message_of(suspended, "spec.suspend is true")
elseif phase == "Succeeded" then
  hs.status = "Healthy"
  hs.message = message_of(condition(status, "Succeeded"), "training finished")
elseif phase == "Running" and ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = message_of(ready, "all pods ready")
elseif phase == "Restarting" then
  hs.message = message_of(condition(status, "Restarting"), message_of(ready, "restarting from the last checkpoint"))
elseif placed ~= nil and placed.status == "False" then
  hs.message = "Not placed: " .. message_of(placed, placed.reason or "waiting for GPUs")
else
  hs.message = message_of(ready, "Phase " .. tostring(phase))
end
return hs
