// Echo agent served by the @a2a-js/sdk server (express, in-memory tasks), for the benchmarks.
//
// The JavaScript counterpart of echo_server.py's default behaviour: every message gets a task
// that goes SUBMITTED, WORKING, an artifact "echo" with the text (without a leading "echo "),
// COMPLETED, published as the same four events the Python peer enqueues. JSON-RPC (POST /)
// only, the agent card at /.well-known/agent-card.json.
//
// Run:  node echo_server.mjs [--host HOST] [--port PORT]   (defaults 127.0.0.1 and 0, a free port)
// Prints one line `READY <base_url>` once it accepts connections.
import { randomUUID } from "node:crypto";
import express from "express";
import { AGENT_CARD_PATH } from "@a2a-js/sdk";
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from "@a2a-js/sdk/server";
import { UserBuilder, agentCardHandler, jsonRpcHandler } from "@a2a-js/sdk/server/express";

const TASK_STATE_SUBMITTED = 1;
const TASK_STATE_WORKING = 2;
const TASK_STATE_COMPLETED = 3;

const textPart = (value) => ({ content: { $case: "text", value }, metadata: undefined, filename: "", mediaType: "" });

// The first text part, without a leading "echo " (as echo_server.py's `echo <text>`).
const echoed = (message) => {
  const part = message.parts.find((p) => p.content?.$case === "text");
  const text = part ? part.content.value : "";
  const trimmed = text.trim();
  return trimmed.startsWith("echo ") ? trimmed.slice(5) : text;
};

const status = (state) => ({ state, message: undefined, timestamp: new Date().toISOString() });

const executor = {
  async execute(context, bus) {
    const { taskId, contextId } = context;
    const message = context.userMessage;
    if (!context.task) {
      bus.publish(
        AgentEvent.task({
          id: taskId,
          contextId,
          status: status(TASK_STATE_SUBMITTED),
          artifacts: [],
          history: [message],
          metadata: undefined,
        }),
      );
    } else {
      bus.publish(AgentEvent.task(context.task));
    }
    bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: status(TASK_STATE_WORKING), metadata: undefined }));
    bus.publish(
      AgentEvent.artifactUpdate({
        taskId,
        contextId,
        artifact: {
          artifactId: randomUUID(),
          name: "echo",
          description: "",
          parts: [textPart(echoed(message))],
          metadata: undefined,
          extensions: [],
        },
        append: false,
        lastChunk: true,
        metadata: undefined,
      }),
    );
    bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: status(TASK_STATE_COMPLETED), metadata: undefined }));
    bus.finished();
  },
  async cancelTask() {},
};

function card(baseUrl) {
  return {
    name: "Echo Peer (JS)",
    description: "@a2a-js/sdk echo agent for the benchmarks",
    supportedInterfaces: [{ url: `${baseUrl}/`, protocolBinding: "JSONRPC", tenant: "", protocolVersion: "1.0" }],
    provider: undefined,
    version: "1.0.0",
    capabilities: { streaming: true, pushNotifications: false, extensions: [] },
    securitySchemes: {},
    securityRequirements: [],
    defaultInputModes: ["text/plain"],
    defaultOutputModes: ["text/plain"],
    skills: [
      {
        id: "echo",
        name: "Echo",
        description: "Echoes text.",
        tags: ["echo", "test"],
        examples: ["echo hi"],
        inputModes: [],
        outputModes: [],
        securityRequirements: [],
      },
    ],
    signatures: [],
  };
}

const option = (name, fallback) => {
  const at = process.argv.indexOf(name);
  return at >= 0 ? process.argv[at + 1] : fallback;
};
const host = option("--host", "127.0.0.1");
const port = Number(option("--port", "0"));

const app = express();
const server = app.listen(port, host, () => {
  const baseUrl = `http://${host}:${server.address().port}`;
  const handler = new DefaultRequestHandler(card(baseUrl), new InMemoryTaskStore(), executor);
  app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: handler }));
  app.use("/", jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
  console.log(`READY ${baseUrl}`);
});
