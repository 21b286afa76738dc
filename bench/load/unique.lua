-- Unique URLs for the miss-heavy rows of scripts/bench-load (appended to report.lua): every
-- request asks for /css/alice.css?bench=<prefix>-<thread>-<n>, so no two requests share a
-- cache key. The prefix (wrk's first argument after `--`) keeps runs apart.
local threads = 0
setup = function(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

local prefix, n = "u", 0
init = function(args)
  prefix = (args[1] or "u") .. "-" .. tostring(tid or 0)
end
request = function()
  n = n + 1
  return wrk.format(nil, "/css/alice.css?bench=" .. prefix .. "-" .. n)
end
