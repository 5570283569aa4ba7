// The demo agents (writer, failer, asker, sleeper) on the official @a2a-js/sdk server, with
// push notifications on: a second, independent A2A implementation for the bridge's tests,
// in every binding that SDK serves.
//
// The scripts are those of bridge/demo/scripts.py (same names, same `key=value` words, same
// steps); tests/servers/test_js_agents.py checks the two agree on what they send.
// Laid out like bridge/demo/sdk_agents.py lays out the a2a-sdk ones; each agent's card is at
// <agent URL>/.well-known/agent-card.json and offers exactly the interfaces served for it:
//   /agents/<script>        JSON-RPC, v1.0 (`A2A-Version: 1.0`) and v0.3 (the SDK's legacy
//                           compat layer)
//   /agents/<script>-rest   HTTP+JSON v1.0, its routes under /agents/<script>-rest/rest
//   /agents/<script>-grpc   gRPC v1.0, on a port of its own (one server per agent: every
//                           agent's methods have the same names, /lf.a2a.v1.A2AService/...)
//   /agents/writer-all      GRPC, HTTP+JSON, JSON-RPC, in that order of preference
// The gRPC agents are hosted only with --grpc-port P (each on a port from P on; 0: each on
// a free port), as with sdk_agents; their URLs (grpc://host:port) are printed before the
// ready line.
// POST /_control/drop {"taskId": id} cuts that Task's open streams as a lost connection would
// (as bridge/demo/gateway.py's does), for the bridge's resume tests; it answers {"dropped": n}.
//
// Pushes: the SDK's InMemoryPushNotificationStore and its legacy-aware
// DefaultPushNotificationSender (v1.0 StreamResponse bodies for a v1.0 request, v0.3 Task
// snapshots for a v0.3 one). The SDK sends each notification once and drops it on any error;
// like bridge/demo/sdk_agents.py this server retries a 5xx/408/429 or a connection error
// (honouring Retry-After) up to --push-attempts times, as A2A asks of an agent ("at least once").
//
// Run: node agents-js/server.js --host 127.0.0.1 --port 18095 [--grpc-port 0] [--push-attempts 8]
// It prints "js agents listening on http://host:port" once it listens (on every port).

import express from "express";
import * as grpc from "@grpc/grpc-js";
import { parseArgs } from "node:util";
import { randomUUID } from "node:crypto";
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore, InMemoryPushNotificationStore } from "@a2a-js/sdk/server";
import { agentCardHandler, jsonRpcHandler, restHandler } from "@a2a-js/sdk/server/express";
import { A2AService, grpcService } from "@a2a-js/sdk/server/grpc";
import { createLegacyAwarePushNotificationSender } from "@a2a-js/sdk/compat/v0_3/server";

const SCRIPTS = ["writer", "failer", "asker", "sleeper"];
const JSONRPC = "JSONRPC";
const REST = "HTTP+JSON";
const GRPC = "GRPC";
// Every agent hosted: its URL name, its script and the bindings its card offers, in its order
// of preference (bridge/demo/sdk_agents.py's HOSTED, less the non-streaming writer-poll ones).
const HOSTED = [
  ...SCRIPTS.map((script) => ({ name: script, script, bindings: [JSONRPC] })),
  ...SCRIPTS.map((script) => ({ name: `${script}-rest`, script, bindings: [REST] })),
  ...SCRIPTS.map((script) => ({ name: `${script}-grpc`, script, bindings: [GRPC] })),
  { name: "writer-all", script: "writer", bindings: [GRPC, REST, JSONRPC] },
];
const CARD_PATH = "/.well-known/agent-card.json";
// Where under an agent's URL its HTTP+JSON routes are (as in bridge/demo/sdk_agents.py).
const REST_PATH = "/rest";
const State = { SUBMITTED: 1, WORKING: 2, COMPLETED: 3, FAILED: 4, CANCELED: 5, INPUT_REQUIRED: 6, AUTH_REQUIRED: 8 };
const ROLE_USER = 1;
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

// `turn` counts the user messages of the Task before this one (the asker's second turn answers).
function* run(agent, text, turn) {
  const p = params(text);
  const interval = num(p, "interval", 0.05);
  if (agent === "writer") {
    const n = Math.max(1, Math.trunc(num(p, "chunks", 5)));
    const size = Math.trunc(num(p, "size", 0));
    const statusSize = Math.trunc(num(p, "status_size", 0));
    yield { status: "working", text: "writing" + "s".repeat(Math.max(0, statusSize - "writing".length)) };
    for (let i = 0; i < n; i++) {
      yield { pause: interval };
      yield { chunk: chunkText(i, n, size), artifactId: "result", name: "result", append: i > 0, lastChunk: i === n - 1 };
    }
    yield { status: "completed" };
  } else if (agent === "failer") {
    yield { status: "working" };
    yield { pause: interval };
    yield { status: "failed", text: "simulated failure: the tool crashed" };
  } else if (agent === "asker" && "auth" in p) {
    yield { status: "working", text: "thinking" };
    yield { pause: interval };
    yield { status: "auth-required", text: "Sign in to the report store to continue" };
    yield { pause: num(p, "auth", 1.0) };
    yield { status: "working", text: "signed in" };
    yield { pause: interval };
    yield { chunk: "stored after sign-in", artifactId: "answer", name: "answer", append: false, lastChunk: true };
    yield { status: "completed" };
  } else if (agent === "asker") {
    if (turn === 0) {
      yield { status: "working", text: "thinking" };
      yield { pause: interval };
      yield { status: "input-required", text: "Which format do you want? Options: json, csv" };
    } else {
      yield { status: "working", text: "formatting" };
      yield { pause: interval };
      yield { chunk: `you chose: ${text}`, artifactId: "answer", name: "answer", append: false, lastChunk: true };
      yield { status: "completed" };
    }
  } else if (agent === "sleeper") {
    const ticks = Math.trunc(num(p, "ticks", 20));
    const sleep = num(p, "interval", 0.5);
    yield { status: "working", text: "starting" };
    for (let i = 0; i < ticks; i++) {
      yield { pause: sleep };
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
    // The SDK has already added this message to a Task it continues: the turn is the user
    // messages before it.
    const turn = (requestContext.task?.history ?? []).filter((m) => m.role === ROLE_USER && m.messageId !== message.messageId).length;
    try {
      for (const step of run(this.script, userText(message), turn)) {
        if (this.canceled.has(taskId)) return;
        if (step.pause !== undefined) {
          await new Promise((resolve) => setTimeout(resolve, step.pause * 1000));
        } else if (step.status !== undefined) {
          eventBus.publish(statusEvent(taskId, contextId, State[step.status.toUpperCase().replace("-", "_")], step.text));
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

// ---- streams a test can cut ----

// Every stream open now (a send's or a subscribe's, in any binding): the Task it carries and
// how to cut it. POST /_control/drop cuts them as a lost connection would, for the bridge's
// resume tests (like bridge/demo/gateway.py's /_control/drop).
const openStreams = new Set();

// The request's user (the SDK's unauthenticated one: every request shares one task store)
// carrying how to cut the request's connection.
class StreamUser {
  constructor(cut) {
    this.cut = cut;
  }

  get isAuthenticated() {
    return false;
  }

  get userName() {
    return "";
  }
}

// HTTP (JSON-RPC and HTTP+JSON): the socket goes, mid-response, as when the network fails.
const httpUser = (req) => Promise.resolve(new StreamUser(() => req.socket.destroy()));
// gRPC: the call ends UNAVAILABLE, what a gRPC client sees of a lost connection.
const grpcUser = (call) => Promise.resolve(new StreamUser(() => call.emit("error", { code: grpc.status.UNAVAILABLE, details: "stream dropped by /_control/drop" })));

async function* tracked(events, user) {
  const stream = { taskId: undefined, cut: user?.cut };
  try {
    for await (const event of events) {
      const { $case, value } = event.payload ?? {};
      stream.taskId ??= $case === "task" ? value?.id : value?.taskId;
      if (stream.cut !== undefined) openStreams.add(stream);
      // Cut or not, the SDK's loop goes on: it is what stores the Task's events (as it does
      // when a client goes away), so the Task's record stays whole for tasks/get and subscribe.
      yield event;
    }
  } finally {
    openStreams.delete(stream);
  }
}

class DroppableRequestHandler extends DefaultRequestHandler {
  sendMessageStream(params, context) {
    return tracked(super.sendMessageStream(params, context), context.user);
  }

  resubscribe(params, context) {
    return tracked(super.resubscribe(params, context), context.user);
  }
}

function dropStreams(taskId) {
  let dropped = 0;
  for (const stream of [...openStreams]) {
    if (taskId !== undefined && stream.taskId !== taskId) continue;
    openStreams.delete(stream);
    stream.cut();
    dropped += 1;
  }
  return dropped;
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

const DESCRIPTIONS = {
  writer: "Writes `chunks` chunks (append/lastChunk) of one artifact, then completes.",
  failer: "Works briefly, then fails with a status message.",
  asker: "Asks a question (input-required); the follow-up answer completes the task.",
  sleeper: "Ticks `ticks` times every `interval` seconds; the one to cancel.",
};

// What a card lists for each binding it offers: JSON-RPC at 1.0 and 0.3 (one URL speaks both),
// HTTP+JSON at 1.0 under the agent's URL, gRPC at 1.0 at the agent's own gRPC server.
function interfaces(url, bindings, grpcUrl) {
  return bindings.flatMap((binding) => {
    if (binding === JSONRPC) {
      return [
        { url, protocolBinding: JSONRPC, tenant: "", protocolVersion: "1.0" },
        { url, protocolBinding: JSONRPC, tenant: "", protocolVersion: "0.3" },
      ];
    }
    if (binding === REST) return [{ url: url + REST_PATH, protocolBinding: REST, tenant: "", protocolVersion: "1.0" }];
    if (binding === GRPC && grpcUrl) return [{ url: grpcUrl, protocolBinding: GRPC, tenant: "", protocolVersion: "1.0" }];
    throw new Error(`no ${binding} interface is served for ${url}`);
  });
}

function agentCard(baseUrl, agent, grpcUrl) {
  const url = `${baseUrl}/agents/${agent.name}`;
  const description = `${DESCRIPTIONS[agent.script]} (bridge/demo/scripts.py's ${agent.script} on @a2a-js/sdk, with push notifications)`;
  return {
    name: agent.name,
    description,
    supportedInterfaces: interfaces(url, agent.bindings, grpcUrl),
    provider: undefined,
    version: "1.0.0",
    capabilities: { streaming: true, pushNotifications: true, extensions: [], extendedAgentCard: false },
    securitySchemes: {},
    securityRequirements: [],
    defaultInputModes: ["text/plain"],
    defaultOutputModes: ["text/plain"],
    skills: [{ id: agent.name, name: agent.name, description, tags: ["demo", "scripted"], examples: [], inputModes: [], outputModes: [], securityRequirements: [] }],
    signatures: [],
  };
}

// One gRPC server per agent offering GRPC, each bound before the cards are made (they announce
// the ports) and given its service once the agent's request handler exists.
async function bindGrpc(host, firstPort, names) {
  const servers = new Map();
  const shown = host.includes(":") ? `[${host}]` : host; // an IPv6 address in brackets
  for (const [i, name] of names.entries()) {
    const server = new grpc.Server();
    const address = `${shown}:${firstPort ? firstPort + i : 0}`;
    const port = await new Promise((resolve, reject) => {
      server.bindAsync(address, grpc.ServerCredentials.createInsecure(), (error, bound) => (error ? reject(error) : resolve(bound)));
    });
    servers.set(name, { server, url: `grpc://${shown}:${port}` });
  }
  return servers;
}

function positiveInt(values, option, min) {
  const value = Number(values[option]);
  if (!Number.isInteger(value) || value < min) {
    console.error(`js agents: --${option} must be a whole number >= ${min}`);
    process.exit(2);
  }
  return value;
}

async function main() {
  const { values } = parseArgs({
    options: {
      host: { type: "string", default: "127.0.0.1" },
      port: { type: "string", default: "18095" },
      "grpc-port": { type: "string" },
      "push-attempts": { type: "string", default: "8" },
    },
  });
  const attempts = positiveInt(values, "push-attempts", 1);
  const grpcPort = values["grpc-port"] === undefined ? undefined : positiveInt(values, "grpc-port", 0);
  globalThis.fetch = retryingFetch(attempts);
  const baseUrl = `http://${values.host}:${values.port}`;
  const hosted = HOSTED.filter((agent) => grpcPort !== undefined || !agent.bindings.includes(GRPC));
  let grpcServers;
  try {
    grpcServers = grpcPort === undefined ? new Map() : await bindGrpc(values.host, grpcPort, hosted.filter((a) => a.bindings.includes(GRPC)).map((a) => a.name));
  } catch (error) {
    console.error(`js agents: cannot serve gRPC on ${values.host}:${grpcPort}: ${error.message}`);
    process.exit(1);
  }
  const app = express();
  // {"taskId": id} cuts that Task's open streams, {} every one; answers {"dropped": n}.
  app.post("/_control/drop", express.json(), (req, res) => res.json({ dropped: dropStreams(req.body?.taskId) }));
  for (const agent of hosted) {
    const card = agentCard(baseUrl, agent, grpcServers.get(agent.name)?.url);
    const pushStore = new InMemoryPushNotificationStore();
    const handler = new DroppableRequestHandler(card, new InMemoryTaskStore(), new ScriptedExecutor(agent.script), undefined, pushStore, createLegacyAwarePushNotificationSender(pushStore, { timeout: SENDER_TIMEOUT_MS }));
    const path = `/agents/${agent.name}`;
    // The v0.3 card (and v0.3 requests) only where a v0.3 interface is offered: JSON-RPC's.
    const legacyCompat = { enabled: agent.bindings.includes(JSONRPC) };
    app.use(path + CARD_PATH, agentCardHandler({ agentCardProvider: handler, legacyCompat }));
    if (agent.bindings.includes(REST)) {
      app.use(path + REST_PATH, restHandler({ requestHandler: handler, userBuilder: httpUser }));
    }
    if (agent.bindings.includes(JSONRPC)) {
      app.use(path, jsonRpcHandler({ requestHandler: handler, userBuilder: httpUser, legacyCompat }));
    }
    grpcServers.get(agent.name)?.server.addService(A2AService, grpcService({ requestHandler: handler, userBuilder: grpcUser }));
  }
  const server = app.listen(Number.parseInt(values.port, 10), values.host, () => {
    for (const [name, { url }] of grpcServers) console.log(`js agent ${name} serving gRPC on ${url}`);
    console.log(`js agents listening on ${baseUrl}`);
  });
  server.on("error", (error) => {
    console.error(`js agents: cannot listen on ${values.host}:${values.port}: ${error.message}`);
    process.exit(1);
  });
  for (const signal of ["SIGTERM", "SIGINT"]) {
    process.on(signal, () => {
      // A gRPC stream still open would hold a graceful shutdown: the calls end with the process.
      for (const { server: grpcServer } of grpcServers.values()) grpcServer.forceShutdown();
      server.close(() => process.exit(0));
      // An open SSE stream (or an idle keep-alive) would hold close() until the client goes.
      server.closeAllConnections();
    });
  }
}

main();
