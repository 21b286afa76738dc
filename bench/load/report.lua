-- wrk report for scripts/bench-load: one machine-readable line with the run's totals and
-- latency percentiles in microseconds (wrk's --latency stops at p99; p99.9 comes from here).
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d duration_us=%d bytes=%d connect=%d read=%d write=%d status=%d timeout=%d " ..
    "p50=%d p90=%d p99=%d p999=%d max=%d mean=%.1f\n",
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max, latency.mean))
end
