//! OpenTelemetry across nodes, read back from a real OTLP receiver that decodes the wire format
//! with the official protobuf definitions: one trace follows a request through two nodes, a
//! model and an MCP server; Python SDK peers continue Mew's traces and Mew continues theirs;
//! a turn that resumes later (after INPUT_REQUIRED, after a restart) joins its task's trace;
//! a collector that is down changes no task's outcome; a gRPC request's span names the role
//! of its tenant.

use anyhow::{Context, bail, ensure};
use mew_cards::mew::MewMetadata;
use mew_cards::{Message, Task, TaskState};
use mew_tests::model::{ScriptedModel, Step, Usage};
use mew_tests::node::{MewNode, scripted_model_config, send};
use mew_tests::otlp::{
    OtlpReceiver, PYTHON_CLIENT_SERVICE, ReceiverOptions, Span, SpanKind, TracedPythonServer,
    is_ancestor, parent, run_traced_driver,
};
use serde_json::json;

/// How long a condition may take on a busy machine: a liveness bound, not a speed claim.
const WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// A node that exports its spans to `receiver` as `service`, at once (the batch processor's
/// delay made short: the test waits for spans, not for a schedule).
fn traced(node: &mut MewNode, receiver: &OtlpReceiver, service: &str) {
    node.set_env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint());
    node.set_env("OTEL_SERVICE_NAME", service);
    node.set_env("OTEL_BSP_SCHEDULE_DELAY", "50");
}

/// The trace id a task's metadata names.
fn trace_of(task: &Task) -> anyhow::Result<String> {
    let traceparent = MewMetadata::read(task.metadata.as_ref())
        .traceparent
        .context("the task names no trace")?;
    let id = traceparent.split('-').nth(1).context("a traceparent")?;
    Ok(id.to_owned())
}

/// The one span of `spans` that `matches`, or an error listing the spans.
fn one<'a>(
    spans: &'a [Span],
    what: &str,
    matches: impl Fn(&Span) -> bool,
) -> anyhow::Result<&'a Span> {
    let found: Vec<&Span> = spans.iter().filter(|span| matches(span)).collect();
    match found.as_slice() {
        [span] => Ok(span),
        _ => bail!(
            "{} spans are {what}: {:?}",
            found.len(),
            spans
                .iter()
                .map(|s| (s.service.clone(), s.name.clone()))
                .collect::<Vec<_>>()
        ),
    }
}

/// What the receiver holds, for a failure's message: service, name, ids, kind of each span.
async fn listing(receiver: &OtlpReceiver) -> String {
    match receiver.spans().await {
        Ok(spans) => spans
            .iter()
            .map(|s| {
                format!(
                    "\n  {:?} {:?} trace {} span {} parent {:?} {:?}",
                    s.service, s.name, s.trace_id, s.span_id, s.parent_span_id, s.kind
                )
            })
            .collect(),
        Err(e) => format!("(cannot read the spans: {e})"),
    }
}

fn is_child(spans: &[Span], child: &Span, of: &Span) -> bool {
    parent(spans, child).is_some_and(|p| p.span_id == of.span_id)
}

#[tokio::test]
async fn one_trace_follows_a_delegation_across_two_nodes_a_model_and_an_mcp_server()
-> anyhow::Result<()> {
    let receiver = OtlpReceiver::start().await?;
    let mcp_server = mew_tests::mcp::TestMcpServer::start_http().await?;

    // B: a model role that calls the hermetic MCP server's trace_context tool.
    let model_b = ScriptedModel::start(vec![
        Step::tool_call("call_b", "mcp__hermetic__trace_context", json!({}))
            .with_usage(Usage::new(11, 7).with_cache(5, 0)),
        Step::text("traced").expect_tool_results(["call_b"]),
    ])?;
    let mut b = MewNode::new()?;
    b.write_config(&format!(
        "{}permissions:\n  allow: [mcp__hermetic__trace_context]\n\
         mcp_servers:\n  hermetic:\n    url: {}\n",
        scripted_model_config(&model_b),
        mcp_server.url()
    ))?;
    b.write_role(
        "worker.md",
        "---\nname: worker\ndescription: Works.\ntools: [mcp__hermetic]\n---\nWork.\n",
    )?;
    traced(&mut b, &receiver, "node-b");
    b.launch().await?;

    // A: a model role that delegates to b/worker.
    let model_a = ScriptedModel::start(vec![
        Step::tool_call(
            "call_a",
            "Agent",
            json!({"prompt": "do it", "description": "work", "subagent_type": "b/worker"}),
        ),
        Step::text("done").expect_tool_results(["call_a"]),
    ])?;
    let mut a = MewNode::new()?;
    a.write_config(&format!(
        "{}peers:\n  b: {{url: \"{}\"}}\n",
        scripted_model_config(&model_a),
        b.url()
    ))?;
    a.write_role(
        "lead.md",
        "---\nname: lead\ndescription: Delegates.\ntools: [Agent]\n---\nDelegate.\n",
    )?;
    traced(&mut a, &receiver, "node-a");
    a.launch().await?;

    let task = send(&a, "lead", Message::user_text("go")).await?;
    ensure!(task.status.state == TaskState::Completed, "{task:?}");
    let trace = trace_of(&task)?;

    // Every span of the trace, once the last ones (A's request and B's model calls) are in.
    let spans = receiver
        .wait_for("the whole trace", |spans| {
            let ours: Vec<Span> = spans
                .iter()
                .filter(|s| s.trace_id == trace)
                .cloned()
                .collect();
            let has = |service: &str, name: &str| {
                ours.iter()
                    .any(|s| s.is_from(service) && s.name.starts_with(name))
            };
            (has("node-a", "SendMessage lead")
                && ours
                    .iter()
                    .filter(|s| s.is_from("node-b") && s.name.starts_with("chat "))
                    .count()
                    == 2
                && has("node-b", "tools/call trace_context")
                && has("node-b", "SendStreamingMessage worker"))
            .then_some(ours)
        })
        .await;
    let spans = match spans {
        Ok(spans) => spans,
        Err(e) => bail!(
            "{e}; trace {trace}; the receiver holds:{}",
            listing(&receiver).await
        ),
    };

    let a_request = one(&spans, "A's request", |s| {
        s.is_from("node-a") && s.name == "SendMessage lead"
    })?;
    ensure!(
        a_request.kind == SpanKind::Server && a_request.is_root(),
        "{a_request:?}"
    );
    ensure!(
        a_request.str_attribute("a2a.task_id") == Some(task.id.as_str())
            && a_request.str_attribute("a2a.binding") == Some("jsonrpc")
            && a_request.str_attribute("a2a.role") == Some("lead"),
        "{a_request:?}"
    );
    let a_turn = one(&spans, "A's turn", |s| {
        s.is_from("node-a") && s.name == "turn lead"
    })?;
    ensure!(
        is_child(&spans, a_turn, a_request),
        "A's turn is not under its request"
    );
    let a_delegation = one(&spans, "A's delegation", |s| {
        s.is_from("node-a") && s.name.starts_with("delegate ")
    })?;
    ensure!(a_delegation.kind == SpanKind::Client, "{a_delegation:?}");
    ensure!(
        is_ancestor(&spans, a_turn, a_delegation),
        "the delegation is not in A's turn"
    );
    let a_tool = one(&spans, "A's Agent call", |s| s.name == "execute_tool Agent")?;
    ensure!(
        is_child(&spans, a_delegation, a_tool)
            && a_tool.str_attribute("mew.tool.category") == Some("delegate")
            && a_tool.str_attribute("mew.permission.decision") == Some("allow")
            && a_tool.str_attribute("mew.tool.outcome") == Some("ok"),
        "{a_tool:?}"
    );

    let b_request = one(&spans, "B's request", |s| {
        s.is_from("node-b") && s.name == "SendStreamingMessage worker"
    })?;
    ensure!(
        b_request.kind == SpanKind::Server && is_child(&spans, b_request, a_delegation),
        "B's request is not the child of A's delegation: {b_request:?}"
    );
    let b_turn = one(&spans, "B's turn", |s| {
        s.is_from("node-b") && s.name == "turn worker"
    })?;
    ensure!(
        is_child(&spans, b_turn, b_request),
        "B's turn is not under its request"
    );
    // The alias `sonnet` the config names is mapped to the provider's model id.
    let model_id = model_b.requests()[0].body["model"]
        .as_str()
        .context("B's model id")?
        .to_owned();
    let chats: Vec<&Span> = spans
        .iter()
        .filter(|s| s.is_from("node-b") && s.name == format!("chat {model_id}"))
        .collect();
    ensure!(chats.len() == 2, "{} model call spans on B", chats.len());
    for chat in &chats {
        ensure!(
            chat.kind == SpanKind::Client
                && is_child(&spans, chat, b_turn)
                && chat.str_attribute("gen_ai.operation.name") == Some("chat")
                && chat.str_attribute("gen_ai.system") == Some("openai")
                && chat.str_attribute("gen_ai.request.model") == Some(model_id.as_str())
                && chat.str_attribute("gen_ai.response.model") == Some(model_id.as_str()),
            "{chat:?}"
        );
        ensure!(
            chat.attribute("gen_ai.input.messages").is_none(),
            "a prompt was recorded without capture_content"
        );
    }
    let first = chats
        .iter()
        .find(|s| s.str_attribute("gen_ai.response.finish_reasons") == Some("tool_calls"))
        .context("B's first model call")?;
    ensure!(
        first.int_attribute("gen_ai.usage.input_tokens") == Some(11)
            && first.int_attribute("gen_ai.usage.output_tokens") == Some(7)
            && first.int_attribute("gen_ai.usage.cache_read.input_tokens") == Some(5),
        "{first:?}"
    );
    let mcp = one(&spans, "B's MCP call", |s| {
        s.name == "tools/call trace_context"
    })?;
    ensure!(
        mcp.kind == SpanKind::Client
            && is_ancestor(&spans, b_turn, mcp)
            && mcp.str_attribute("mcp.server") == Some("hermetic"),
        "{mcp:?}"
    );

    // The trace context went to the model services and, in `_meta`, to the MCP server.
    for (name, model) in [("A's", &model_a), ("B's", &model_b)] {
        for request in model.requests() {
            let header = request.header("traceparent").unwrap_or_default();
            ensure!(
                header.starts_with(&format!("00-{trace}-")),
                "{name} model call had traceparent {header:?}"
            );
        }
    }
    let answered = model_b.requests()[1].last_user_text();
    let context = format!("00-{trace}-{}-01", mcp.span_id);
    ensure!(
        answered.contains(&format!("meta {context}"))
            && answered.contains(&format!("header {context}")),
        "the MCP server saw {answered:?}, not the MCP span's context in _meta and the header"
    );

    // The CLI shows the task's trace id.
    let (code, out, err) = a
        .client(&["tasks", "get", task.id.as_str(), "--node", a.url()])
        .await?;
    ensure!(
        code == 0
            && out
                .lines()
                .any(|line| line.starts_with("trace:") && line.ends_with(&trace)),
        "{out}{err}"
    );
    let (code, out, err) = a
        .client(&["tasks", "tree", task.id.as_str(), "--node", a.url()])
        .await?;
    ensure!(
        code == 0 && out.contains(&format!("trace: {trace}")),
        "{out}{err}"
    );
    model_a.assert_done();
    model_b.assert_done();
    Ok(())
}

#[tokio::test]
async fn python_sdk_peers_continue_mews_traces_and_mew_continues_theirs() -> anyhow::Result<()> {
    let receiver = OtlpReceiver::start().await?;
    let python = TracedPythonServer::start(&receiver).await?;
    let mut node = MewNode::new_echo("")?;
    node.write_role(
        "python.md",
        &format!(
            "---\nname: python\ndescription: The Python peer.\nremote: {}\n---\n",
            python.base_url
        ),
    )?;
    traced(&mut node, &receiver, "mew");
    node.launch().await?;

    // Mew calls the instrumented Python agent: its HTTP server span continues Mew's trace.
    let task = send(&node, "python", Message::user_text("hello")).await?;
    ensure!(task.status.state == TaskState::Completed, "{task:?}");
    let trace = trace_of(&task)?;
    let (python_span, spans) = receiver
        .wait_for("the Python peer's server span in Mew's trace", |spans| {
            let ours: Vec<Span> = spans
                .iter()
                .filter(|s| s.trace_id == trace)
                .cloned()
                .collect();
            ours.iter()
                .find(|s| {
                    s.is_from(TracedPythonServer::SERVICE)
                        && s.kind == SpanKind::Server
                        && s.scope == TracedPythonServer::HTTP_SCOPE
                })
                .filter(|span| parent(&ours, span).is_some())
                .cloned()
                .map(|span| (span, ours.clone()))
        })
        .await?;
    let caller = parent(&spans, &python_span);
    ensure!(
        caller.is_some_and(|c| c.is_from("mew") && c.kind == SpanKind::Client),
        "the Python server span's parent is {caller:?}"
    );

    // An instrumented Python client calls Mew: Mew's request span continues the client's trace.
    let driven = run_traced_driver(
        &receiver,
        &format!("{}/agents/echo", node.url()),
        "jsonrpc",
        &["send", "meow"],
    )
    .await?;
    let request = receiver
        .wait_for("Mew's request span in the Python client's trace", |spans| {
            spans
                .iter()
                .find(|s| {
                    s.trace_id == driven.trace_id
                        && s.is_from("mew")
                        && s.kind == SpanKind::Server
                        && parent(spans, s).is_some()
                })
                .cloned()
        })
        .await?;
    let spans = receiver.trace(&driven.trace_id).await?;
    let caller = parent(&spans, &request).context("Mew's request span has no parent")?;
    ensure!(
        caller.is_from(PYTHON_CLIENT_SERVICE) && caller.kind == SpanKind::Client,
        "Mew's request span's parent is {caller:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_turn_that_resumes_after_input_required_and_a_restart_joins_the_tasks_trace()
-> anyhow::Result<()> {
    let receiver = OtlpReceiver::start().await?;
    let model = ScriptedModel::start(vec![
        Step::tool_call("toolu_1", "bash", json!({"command": "echo done > out.txt"})),
        Step::text("Wrote it.").expect_tool_results(["toolu_1"]),
    ])?;
    let mut node = MewNode::new()?;
    node.write_config(&scripted_model_config(&model))?;
    node.write_role(
        "writer.md",
        "---\nname: writer\ndescription: Writes.\ntools: [bash]\n---\nWrite.\n",
    )?;
    traced(&mut node, &receiver, "mew");
    node.launch().await?;

    let asked = send(&node, "writer", Message::user_text("write the file")).await?;
    ensure!(asked.status.state == TaskState::InputRequired, "{asked:?}");
    let trace = trace_of(&asked)?;
    receiver
        .wait_for("the first turn", |spans| {
            spans
                .iter()
                .any(|s| s.trace_id == trace && s.name == "turn writer")
                .then_some(())
        })
        .await?;

    // The answer comes after a restart, in a request of its own (a trace of its own).
    node.restart().await?;
    let mut yes = Message::user_text("yes");
    yes.task_id = Some(asked.id.clone());
    let done = send(&node, "writer", yes).await?;
    ensure!(done.status.state == TaskState::Completed, "{done:?}");
    ensure!(trace_of(&done)? == trace, "the task's trace changed");

    let found = receiver
        .wait_for("the resumed turn and the answering request", |spans| {
            let turns: Vec<Span> = spans
                .iter()
                .filter(|s| s.name == "turn writer")
                .cloned()
                .collect();
            let answer = spans
                .iter()
                .find(|s| s.name == "SendMessage writer" && s.trace_id != trace)?;
            (turns.len() == 2).then(|| (turns, answer.clone()))
        })
        .await;
    let (turns, answer) = match found {
        Ok(found) => found,
        Err(e) => bail!(
            "{e}; trace {trace}; the receiver holds:{}",
            listing(&receiver).await
        ),
    };
    ensure!(
        turns.iter().all(|t| t.trace_id == trace),
        "a turn left the task's trace: {turns:?}"
    );
    // The turn that ran last (the node counts the turns of what it loaded afresh).
    let resumed = turns
        .iter()
        .max_by_key(|t| t.start_time_unix_nano)
        .context("the turns")?;
    ensure!(
        resumed
            .links
            .iter()
            .any(|link| link.trace_id == answer.trace_id && link.span_id == answer.span_id),
        "the resumed turn is not linked to the request that answered: {resumed:?}"
    );
    model.assert_done();
    Ok(())
}

#[tokio::test]
async fn a_collector_that_is_down_or_slow_changes_no_outcome() -> anyhow::Result<()> {
    for options in [
        ReceiverOptions {
            fail_with: Some(503),
            ..ReceiverOptions::default()
        },
        ReceiverOptions {
            delay: Some(std::time::Duration::from_secs(3)),
            ..ReceiverOptions::default()
        },
    ] {
        let receiver = OtlpReceiver::start_with(options).await?;
        let mut node = MewNode::new_echo("")?;
        traced(&mut node, &receiver, "mew");
        node.launch().await?;
        for n in 0..5 {
            let task = send(&node, "echo", Message::user_text(format!("hello {n}"))).await?;
            ensure!(task.status.state == TaskState::Completed, "{task:?}");
        }
        // The node did try: the receiver saw its exports (and refused or delayed them).
        mew_tests::node::poll_until("the node's exports", WAIT, || async {
            Ok((receiver.stats().await?.exports > 0).then_some(()))
        })
        .await?;
        node.stop().await?;
    }
    // A collector nobody listens on: one warning, and the tasks complete.
    let mut node = MewNode::new_echo("")?;
    node.set_env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9");
    node.set_env("OTEL_BSP_SCHEDULE_DELAY", "50");
    node.launch().await?;
    for n in 0..5 {
        let task = send(&node, "echo", Message::user_text(format!("hello {n}"))).await?;
        ensure!(task.status.state == TaskState::Completed, "{task:?}");
    }
    mew_tests::node::poll_until("the exporter's warning", WAIT, || async {
        Ok(node.log().contains("cannot export traces").then_some(()))
    })
    .await?;
    ensure!(
        node.log().matches("cannot export traces").count() == 1,
        "the warning repeats: {}",
        node.log()
    );
    Ok(())
}

/// Sends "hello" to `role` of `node` over JSON-RPC with a W3C `traceparent` header: the task.
async fn send_with_traceparent(
    node: &MewNode,
    role: &str,
    traceparent: &str,
) -> anyhow::Result<Task> {
    let body = json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}
    });
    let answer: serde_json::Value = reqwest::Client::new()
        .post(format!("{}/agents/{role}", node.url()))
        .header("A2A-Version", "1.0")
        .header("traceparent", traceparent)
        .json(&body)
        .send()
        .await?
        .json()
        .await?;
    let task = answer["result"]["task"].clone();
    serde_json::from_value(task).with_context(|| format!("not a task: {answer}"))
}

#[tokio::test]
async fn inbound_trace_context_is_continued_unless_the_config_says_none_and_prompts_only_on_request()
-> anyhow::Result<()> {
    let receiver = OtlpReceiver::start().await?;
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let traceparent = format!("00-{caller_trace}-00f067aa0ba902b7-01");
    let model = ScriptedModel::start(vec![Step::text("hi"), Step::text("hi")])?;
    let role = "---\nname: greeter\ndescription: Greets.\n---\nGreet.\n";

    // By default the caller's trace is continued: the request's span is its child.
    let mut trusting = MewNode::new()?;
    trusting.write_config(&scripted_model_config(&model))?;
    trusting.write_role("greeter.md", role)?;
    traced(&mut trusting, &receiver, "trusting");
    trusting.launch().await?;
    let task = send_with_traceparent(&trusting, "greeter", &traceparent).await?;
    ensure!(trace_of(&task)? == caller_trace, "{task:?}");

    // `inbound: none`: a trace of its own; `capture_content`: the prompt and the answer.
    let mut wary = MewNode::new()?;
    wary.write_config(&format!(
        "{}telemetry:\n  inbound: none\n  capture_content: true\n",
        scripted_model_config(&model)
    ))?;
    wary.write_role("greeter.md", role)?;
    traced(&mut wary, &receiver, "wary");
    wary.launch().await?;
    let task = send_with_traceparent(&wary, "greeter", &traceparent).await?;
    let own = trace_of(&task)?;
    ensure!(own != caller_trace, "the caller's trace was continued");

    let spans = receiver
        .wait_for("both nodes' request and model spans", |spans| {
            let done = |service: &str| {
                spans
                    .iter()
                    .any(|s| s.is_from(service) && s.name == "SendMessage greeter")
                    && spans
                        .iter()
                        .any(|s| s.is_from(service) && s.name.starts_with("chat "))
            };
            (done("trusting") && done("wary")).then(|| spans.to_vec())
        })
        .await?;
    let request = |service: &str| {
        one(&spans, "the request", |s| {
            s.is_from(service) && s.name == "SendMessage greeter"
        })
    };
    let trusting_request = request("trusting")?;
    ensure!(
        trusting_request.trace_id == caller_trace
            && trusting_request.parent_span_id.as_deref() == Some("00f067aa0ba902b7"),
        "{trusting_request:?}"
    );
    let wary_request = request("wary")?;
    ensure!(
        wary_request.trace_id == own && wary_request.is_root(),
        "{wary_request:?}"
    );
    let chat = |service: &str| {
        one(&spans, "the model call", |s| {
            s.is_from(service) && s.name.starts_with("chat ")
        })
    };
    ensure!(
        chat("trusting")?
            .attribute("gen_ai.input.messages")
            .is_none(),
        "a prompt was recorded without capture_content"
    );
    let captured = chat("wary")?;
    ensure!(
        captured
            .str_attribute("gen_ai.input.messages")
            .is_some_and(|m| m.contains("hello"))
            && captured.str_attribute("gen_ai.output.messages") == Some("hi"),
        "{captured:?}"
    );
    Ok(())
}

/// A gRPC call names its role in its `tenant`, not its path: its span still says the role.
#[tokio::test]
async fn a_grpc_request_span_names_the_role_of_its_tenant() -> anyhow::Result<()> {
    use mew_transport::{AgentTransport, Binding, CallContext};

    let receiver = OtlpReceiver::start().await?;
    let mut node = MewNode::new_echo("")?;
    node.write_role(
        "upper.md",
        "---\nname: upper\ndescription: Shouts.\ncommand: [tr, a-z, A-Z]\n---\n",
    )?;
    traced(&mut node, &receiver, "grpc-node");
    node.launch().await?;
    let agent = node.agent("/agents/upper", Binding::Grpc).await?;
    let sent = agent
        .send_message(
            &CallContext::anonymous(),
            mew_cards::SendMessageRequest::new(Message::user_text("hi")),
        )
        .await?;
    ensure!(
        matches!(&sent, mew_cards::SendMessageResponse::Task(t) if t.status.state == TaskState::Completed),
        "{sent:?}"
    );
    let spans = receiver
        .wait_for("the gRPC request's span", |spans| {
            spans
                .iter()
                .any(|s| s.is_from("grpc-node") && s.name == "SendMessage upper")
                .then(|| spans.to_vec())
        })
        .await?;
    let request = one(&spans, "the request", |s| {
        s.is_from("grpc-node") && s.name == "SendMessage upper"
    })?;
    ensure!(
        request.str_attribute("a2a.role") == Some("upper")
            && request.str_attribute("a2a.binding") == Some("grpc"),
        "{request:?}"
    );
    Ok(())
}
