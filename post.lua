wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("/work/main/Tests/Fixtures/webhooks/a-1.23-http-down.json", "rb")
wrk.body = f:read("*a")
f:close()
