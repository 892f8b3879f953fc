-- wrk's script for bench/serve.sh: POSTs the body in $BODY with $TYPE as
-- its Content-Type to the URL's path; prints "requests non2xx p50_ms p99_ms seconds".
wrk.method = "POST"
wrk.headers["Content-Type"] = os.getenv("TYPE")
local f = assert(io.open(os.getenv("BODY"), "rb"))
wrk.body = f:read("*a")
f:close()

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT %d %d %.2f %.2f %.3f\n", summary.requests,
    e.status + e.connect + e.read + e.write + e.timeout,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, summary.duration / 1e6))
end
