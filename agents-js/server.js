// The writer and sleeper demo agents on the official @a2a-js/sdk server, with push
// notifications on: a second, independent A2A implementation for the bridge's tests.
//
// The scripts are those of bridge/demo/scripts.py (same names, same `key=value` words, same
// steps); tests/servers/test_js_agents.py checks the two agree on what they send.
// One URL per agent, /agents/<name>, speaks A2A v1.0 JSON-RPC (`A2A-Version: 1.0`) and v0.3
// (the SDK's legacy compat layer); the card is at /agents/<name>/.well-known/agent-card.json.
//
// Pushes: the SDK's InMemoryPushNotificationStore and its legacy-aware
// DefaultPushNotificationSender (v1.0 StreamResponse bodies for a v1.0 request, v0.3 Task
// snapshots for a v0.3 one). The SDK sends each notification once and drops it on any error;
// like bridge/demo/sdk_agents.py this server retries a 5xx/408/429 or a connection error
// (honouring Retry-After) up to --push-attempts times, as A2A asks of an agent ("at least once").
//
// Run: node agents-js/server.js --host 127.0.0.1 --port 18095 [--push-attempts 8]
// It prints "js agents listening on http://host:port" once it listens.

import express from "express";
import { parseArgs } from "node:util";
import { randomUUID } from "node:crypto";
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore, InMemoryPushNotificationStore } from "@a2a-js/sdk/server";
import { agentCardHandler, jsonRpcHandler, UserBuilder } from "@a2a-js/sdk/server/express";
import { createLegacyAwarePushNotificationSender } from "@a2a-js/sdk/compat/v0_3/server";

const AGENTS = ["writer", "sleeper"];
const CARD_PATH = "/.well-known/agent-card.json";
const State = { SUBMITTED: 1, WORKING: 2, COMPLETED: 3, CANCELED: 5 };
const ROLE_AGENT = 2;
const ATTEMPT_TIMEOUT_MS = 10_000;
// The SDK's own timeout covers every attempt of one notification together.
const SENDER_TIMEOUT_MS = 300_000;
const RETRY_STATUSES = new Set([408, 429, 500, 502, 503, 504]);

// ---- the scripts (bridge/demo/scripts.py) ----

function params(text) {
  const out = {};
  for (const word of text.split(/\s+/)) {
    const at = word.indexOf("=");
    if (at > 0) out[word.slice(0, at)] = word.slice(at + 1);
  }
  return out;
}

function num(p, key, fallback) {
  const value = Number.parseFloat(p[key]);
  return key in p && Number.isFinite(value) ? value : fallback;
}

function chunkText(i, n, size) {
  const text = `[${i + 1}/${n}] lorem ipsum dolor sit amet ${String((i * 7919) % 10007).padStart(5, "0")}\n`;
  return text + "é".repeat(Math.max(0, size - text.length));
}

function* run(agent, text) {
  const p = params(text);
  if (agent === "writer") {
    const interval = num(p, "interval", 0.05);
    const n = Math.max(1, Math.trunc(num(p, "chunks", 5)));
    const size = Math.trunc(num(p, "size", 0));
    const statusSize = Math.trunc(num(p, "status_size", 0));
    yield { status: "working", text: "writing" + "s".repeat(Math.max(0, statusSize - "writing".length)) };
    for (let i = 0; i < n; i++) {
      yield { pause: interval };
      yield { chunk: chunkText(i, n, size), artifactId: "result", name: "result", append: i > 0, lastChunk: i === n - 1 };
    }
    yield { status: "completed" };
  } else if (agent === "sleeper") {
    const ticks = Math.trunc(num(p, "ticks", 20));
    const interval = num(p, "interval", 0.5);
    yield { status: "working", text: "starting" };
    for (let i = 0; i < ticks; i++) {
      yield { pause: interval };
      yield { status: "working", text: `tick ${i + 1}/${ticks}` };
    }
    yield { status: "completed" };
  } else {
    throw new Error(`unknown agent ${agent}`);
  }
}

// ---- the executor ----

function agentMessage(text, taskId, contextId) {
  return { messageId: randomUUID(), contextId, taskId, role: ROLE_AGENT, parts: [{ content: { $case: "text", value: text } }], metadata: undefined, extensions: [], referenceTaskIds: [] };
}

function userText(message) {
  return (message?.parts ?? []).filter((part) => part.content?.$case === "text").map((part) => part.content.value).join(" ");
}

function statusEvent(taskId, contextId, state, text) {
  const message = text === undefined ? undefined : agentMessage(text, taskId, contextId);
  return AgentEvent.statusUpdate({ taskId, contextId, status: { state, message, timestamp: new Date().toISOString() }, metadata: undefined });
}

class ScriptedExecutor {
  constructor(script) {
    this.script = script;
    // Tasks asked to cancel: their execute() stops publishing at once, so nothing lands after CANCELED.
    this.canceled = new Set();
  }

  async execute(requestContext, eventBus) {
    const { taskId, contextId } = requestContext;
    const message = requestContext.userMessage;
    eventBus.publish(
      AgentEvent.task(
        requestContext.task ?? { id: taskId, contextId, status: { state: State.SUBMITTED, message: undefined, timestamp: undefined }, artifacts: [], history: [message], metadata: undefined },
      ),
    );
    try {
      for (const step of run(this.script, userText(message))) {
        if (this.canceled.has(taskId)) return;
        if (step.pause !== undefined) {
          await new Promise((resolve) => setTimeout(resolve, step.pause * 1000));
        } else if (step.status !== undefined) {
          eventBus.publish(statusEvent(taskId, contextId, State[step.status.toUpperCase()], step.text));
        } else {
          const artifact = { artifactId: step.artifactId, name: step.name, description: "", parts: [{ content: { $case: "text", value: step.chunk } }], metadata: undefined, extensions: [] };
          eventBus.publish(AgentEvent.artifactUpdate({ taskId, contextId, artifact, append: step.append, lastChunk: step.lastChunk, metadata: undefined }));
        }
      }
    } finally {
      this.canceled.delete(taskId);
      eventBus.finished();
    }
  }

  async cancelTask(taskId, eventBus) {
    this.canceled.add(taskId);
    eventBus.publish(statusEvent(taskId, "", State.CANCELED, "canceled on request"));
    eventBus.finished();
  }
}

// ---- pushes that are delivered at least once ----

function retryDelayMs(response, attempt) {
  const header = response?.headers.get("retry-after");
  const seconds = header === null || header === undefined ? Number.NaN : Number.parseFloat(header);
  if (Number.isFinite(seconds) && seconds >= 0) return Math.min(seconds, 30) * 1000;
  return Math.min(200 * 2 ** attempt, 5000);
}

// The SDK's sender POSTs with the global fetch; this one retries what a receiver asks to be
// retried, so the SDK's own serialisation, headers and per-task ordering are kept unchanged.
function retryingFetch(attempts) {
  const plainFetch = globalThis.fetch;
  return async (url, init) => {
    for (let attempt = 0; ; attempt++) {
      let response;
      try {
        const signal = AbortSignal.any([init?.signal, AbortSignal.timeout(ATTEMPT_TIMEOUT_MS)].filter(Boolean));
        response = await plainFetch(url, { ...init, signal });
      } catch (error) {
        if (attempt + 1 >= attempts || init?.signal?.aborted) throw error;
      }
      if (response !== undefined && (!RETRY_STATUSES.has(response.status) || attempt + 1 >= attempts)) return response;
      await new Promise((resolve) => setTimeout(resolve, retryDelayMs(response, attempt)));
    }
  };
}

// ---- the server ----

function agentCard(baseUrl, name) {
  const url = `${baseUrl}/agents/${name}`;
  return {
    name,
    description: `${name} (bridge/demo/scripts.py) on @a2a-js/sdk, with push notifications`,
    supportedInterfaces: [
      { url, protocolBinding: "JSONRPC", tenant: "", protocolVersion: "1.0" },
      { url, protocolBinding: "JSONRPC", tenant: "", protocolVersion: "0.3" },
    ],
    provider: undefined,
    version: "1.0.0",
    capabilities: { streaming: true, pushNotifications: true, extensions: [], extendedAgentCard: false },
    securitySchemes: {},
    securityRequirements: [],
    defaultInputModes: ["text/plain"],
    defaultOutputModes: ["text/plain"],
    skills: [{ id: name, name, description: name, tags: ["demo", "scripted"], examples: [], inputModes: [], outputModes: [], securityRequirements: [] }],
    signatures: [],
  };
}

function main() {
  const { values } = parseArgs({
    options: {
      host: { type: "string", default: "127.0.0.1" },
      port: { type: "string", default: "18095" },
      "push-attempts": { type: "string", default: "8" },
    },
  });
  const attempts = Number.parseInt(values["push-attempts"], 10);
  if (!Number.isInteger(attempts) || attempts < 1) {
    console.error("js agents: --push-attempts must be a whole number >= 1");
    process.exit(2);
  }
  globalThis.fetch = retryingFetch(attempts);
  const baseUrl = `http://${values.host}:${values.port}`;
  const app = express();
  for (const name of AGENTS) {
    const card = agentCard(baseUrl, name);
    const pushStore = new InMemoryPushNotificationStore();
    const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), new ScriptedExecutor(name), undefined, pushStore, createLegacyAwarePushNotificationSender(pushStore, { timeout: SENDER_TIMEOUT_MS }));
    app.use(`/agents/${name}${CARD_PATH}`, agentCardHandler({ agentCardProvider: handler, legacyCompat: { enabled: true } }));
    app.use(`/agents/${name}`, jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication, legacyCompat: { enabled: true } }));
  }
  const server = app.listen(Number.parseInt(values.port, 10), values.host, () => {
    console.log(`js agents listening on ${baseUrl}`);
  });
  server.on("error", (error) => {
    console.error(`js agents: cannot listen on ${values.host}:${values.port}: ${error.message}`);
    process.exit(1);
  });
  for (const signal of ["SIGTERM", "SIGINT"]) process.on(signal, () => server.close(() => process.exit(0)));
}

main();
