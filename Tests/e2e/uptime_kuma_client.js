// Sends one webhook exactly as Uptime Kuma 2.x's webhook provider does (server/notification-providers/webhook.js
// and notification-provider.js, 2.5.3; see ../shared/reference/uptime-kuma-webhook.md §1), with the real axios and
// form-data libraries from Debian (NODE_PATH=/usr/share/nodejs). Liquid is replaced by a stand-in that renders
// `{{ var }}` unescaped and `{{ var | json }}` as JSON, which is all a webhook template uses; it is not Liquid.
//
// Input (stdin, JSON): {url, notification: {webhookContentType, httpMethod, webhookCustomBody,
// webhookAdditionalHeaders}, monitorJSON, heartbeatJSON, msg}. When msg is absent it is built as Uptime Kuma's
// Monitor.sendNotification builds it: "[<name>] [🔴 Down] <beat msg>" or "[<name>] [✅ Up] <beat msg>".
// Output (stdout, JSON): {ok: true, status, data} or {ok: false, error, status, data}.
//
// Many at once (an alert storm: every monitor of one Uptime Kuma failing together): when the input is a JSON array
// of such requests, all are sent concurrently from this one process, as Uptime Kuma's monitors send theirs, and the
// output is the array of results in input order (the exit code stays 0; each result says how it went). A request
// may name a `localAddress` to send from (e.g. 127.0.0.2): a second Uptime Kuma host, as the relay sees it.
"use strict";

const http = require("http");
const axios = require("axios");
const FormData = require("form-data");

// What the UptimeKumaServer constructor sets process-wide in 2.x (uptime-kuma-server.js): its User-Agent and a
// 300 s timeout.
axios.defaults.headers.common["User-Agent"] = "Uptime-Kuma/2.5.3";
axios.defaults.timeout = 300 * 1000;

const DOWN = 0;
const UP = 1;

/// NotificationProvider.renderTemplate's context (2.x), rendered by the stand-in.
function renderTemplate(template, msg, monitorJSON, heartbeatJSON) {
    let monitorName = "Monitor Name not available";
    let hostnameOrURL = "testing.hostname";
    if (monitorJSON !== null) {
        monitorName = monitorJSON.name;
        hostnameOrURL = monitorJSON.type === "ping" ? monitorJSON.hostname : monitorJSON.url;
    }
    let status = "⚠️ Test";
    if (heartbeatJSON !== null) {
        status = heartbeatJSON.status === DOWN ? "🔴 Down" : "✅ Up";
    }
    const context = {
        STATUS: status, NAME: monitorName, HOSTNAME_OR_URL: hostnameOrURL,
        status, name: monitorName, hostnameOrURL, msg, heartbeatJSON, monitorJSON,
    };
    return template.replace(/\{\{\s*([A-Za-z_]+)\s*(\|\s*json\s*)?\}\}/g, (_, name, json) => {
        const value = context[name];
        if (json) return JSON.stringify(value === undefined ? null : value);
        if (value === null || value === undefined) return "";
        return typeof value === "object" ? "[object Object]" : String(value);
    });
}

/// Webhook.send (2.5.3), minus the proxy agent and the error wrapping.
async function send(notification, msg, monitorJSON = null, heartbeatJSON = null, agent = undefined) {
    const httpMethod = (notification.httpMethod || "post").toLowerCase();
    let data = { heartbeat: heartbeatJSON, monitor: monitorJSON, msg };
    let config = { headers: {} };
    if (agent) {
        config.httpAgent = agent; // where Uptime Kuma puts its proxy agent; here only to pick the source address
    }

    if (httpMethod === "get") {
        config.params = { msg: msg };
        if (heartbeatJSON) {
            config.params.heartbeat = JSON.stringify(heartbeatJSON);
        }
        if (monitorJSON) {
            config.params.monitor = JSON.stringify(monitorJSON);
        }
    } else if (notification.webhookContentType === "form-data") {
        const formData = new FormData();
        formData.append("data", JSON.stringify(data));
        config.headers = formData.getHeaders();
        data = formData;
    } else if (notification.webhookContentType === "custom") {
        data = renderTemplate(notification.webhookCustomBody, msg, monitorJSON, heartbeatJSON);
    }

    if (notification.webhookAdditionalHeaders) {
        try {
            config.headers = { ...config.headers, ...JSON.parse(notification.webhookAdditionalHeaders) };
        } catch (err) {
            throw new Error("Additional Headers is not a valid JSON");
        }
    }

    if (httpMethod === "get") {
        return axios.get(notification.webhookURL, config);
    }
    return axios.post(notification.webhookURL, data, config);
}

function uptimeKumaMessage(monitorJSON, heartbeatJSON) {
    const text = heartbeatJSON.status === UP ? "✅ Up" : "🔴 Down";
    return "[" + monitorJSON.name + "] [" + text + "] " + heartbeatJSON.msg;
}

/// One request of the input, sent; resolves to its result object (never rejects).
async function sendOne(input, agents) {
    const monitorJSON = input.monitorJSON || null;
    const heartbeatJSON = input.heartbeatJSON || null;
    const msg = input.msg !== undefined ? input.msg : uptimeKumaMessage(monitorJSON, heartbeatJSON);
    const notification = { ...input.notification, webhookURL: input.url };
    let agent;
    if (input.localAddress) {
        if (!agents.has(input.localAddress)) {
            agents.set(input.localAddress, new http.Agent({ keepAlive: true, localAddress: input.localAddress }));
        }
        agent = agents.get(input.localAddress);
    }
    try {
        const response = await send(notification, msg, monitorJSON, heartbeatJSON, agent);
        return { ok: true, status: response.status, data: response.data };
    } catch (error) {
        const response = error.response || {};
        return { ok: false, error: String(error.message), status: response.status, data: response.data };
    }
}

async function main() {
    const chunks = [];
    for await (const chunk of process.stdin) chunks.push(chunk);
    const input = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    const agents = new Map();
    if (Array.isArray(input)) {
        const results = await Promise.all(input.map((one) => sendOne(one, agents)));
        process.stdout.write(JSON.stringify(results));
    } else {
        const result = await sendOne(input, agents);
        process.stdout.write(JSON.stringify(result));
        if (!result.ok) process.exitCode = 1;
    }
    for (const agent of agents.values()) agent.destroy();
}

main();
