// A small @a2a-js/sdk agent with one skill, `titlecase`: it answers with the text in Title Case.
//
// Run:  node js_agent.mjs [--port PORT]   (or JS_AGENT_PORT; default 9102; 0 picks a free one)
// Prints one line `READY <base_url>` once it accepts connections.
import { randomUUID } from "node:crypto";
import express from "express";
import { AGENT_CARD_PATH } from "@a2a-js/sdk";
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from "@a2a-js/sdk/server";
import { UserBuilder, agentCardHandler, jsonRpcHandler } from "@a2a-js/sdk/server/express";

const ROLE_AGENT = 2; // Role.ROLE_AGENT
const TASK_STATE_COMPLETED = 3; // TaskState.TASK_STATE_COMPLETED

const titleCase = (text) => text.toLowerCase().replace(/\b\p{L}/gu, (c) => c.toUpperCase());

const textOf = (message) =>
  message.parts
    .filter((part) => part.content?.$case === "text")
    .map((part) => part.content.value)
    .join(" ");

// Answers every message with a completed task holding one artifact.
const executor = {
  async execute(context, bus) {
    const text = titleCase(textOf(context.userMessage));
    bus.publish(
      AgentEvent.task({
        id: context.taskId,
        contextId: context.contextId,
        status: { state: TASK_STATE_COMPLETED, timestamp: new Date().toISOString() },
        artifacts: [
          {
            artifactId: randomUUID(),
            name: "titlecased",
            description: "",
            parts: [{ content: { $case: "text", value: text }, metadata: undefined, filename: "", mediaType: "" }],
            metadata: undefined,
            extensions: [],
          },
        ],
        history: [context.userMessage],
        metadata: undefined,
      }),
    );
    bus.finished();
  },
  async cancelTask() {},
};

function card(baseUrl) {
  // One skill, `titlecase`: Mew addresses it as `<peer>/titlecase`.
  return {
    name: "Title Caser",
    description: "Title-cases text (@a2a-js/sdk example)",
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
        id: "titlecase",
        name: "Title case",
        description: "Answers with the text of the message in Title Case.",
        tags: ["text"],
        examples: ["hello world"],
        inputModes: [],
        outputModes: [],
        securityRequirements: [],
      },
    ],
    signatures: [],
  };
}

const flag = process.argv.indexOf("--port");
const port = Number(flag >= 0 ? process.argv[flag + 1] : (process.env.JS_AGENT_PORT ?? 9102));
const host = "127.0.0.1";

const app = express();
const server = app.listen(port, host, () => {
  const baseUrl = `http://${host}:${server.address().port}`;
  const handler = new DefaultRequestHandler(card(baseUrl), new InMemoryTaskStore(), executor);
  app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: handler }));
  app.use("/", jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
  console.log(`READY ${baseUrl}`);
});
