"""The client of the MCP conformance suite's client scenarios: Mew's own CLI.

The suite (@modelcontextprotocol/conformance) starts a scenario's server, then runs this
program with the server's URL as the last argument and the scenario's name in
MCP_CONFORMANCE_SCENARIO (its data, such as pre-registered client credentials, in
MCP_CONFORMANCE_CONTEXT). The program writes a configuration with the server as `conf` and
does what a user would: `mew mcp tools` / `mew mcp call`, with `--login` where the server
asks for authorization (the authorization page is "opened" by fetching it, which the suite's
authorization server answers with a redirect to Mew's loopback callback). The `mew` binary
is $MEW_BIN.
"""

import json
import os
import subprocess
import sys
import tempfile

# The client ID metadata document the suite's authorization servers expect (SEP-991); it is
# never fetched.
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"

# The scenarios of grants without a user: no sign-in, the tokens come from the configuration.
UNATTENDED = {
    "auth/client-credentials-basic",
    "auth/client-credentials-jwt",
    "auth/wif-jwt-bearer",
    "auth/enterprise-managed-authorization",
}


def main() -> int:
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    work = tempfile.mkdtemp(prefix="mew-conformance-")
    entry = {"type": "http", "url": url}
    unattended = scenario in UNATTENDED
    if scenario == "auth/client-credentials-jwt":
        # Machine use, the client authenticated by an assertion it signs (private_key_jwt).
        entry["oauth"] = {
            "client_id": context["client_id"],
            "private_key": context["private_key_pem"],
            "signing_algorithm": context.get("signing_algorithm", "ES256"),
            "grant": "client_credentials",
        }
    elif scenario.startswith("auth/client-credentials"):
        # Machine use: the client's own credentials, no user (SEP-1046).
        entry["oauth"] = {
            "client_id": context.get("client_id", ""),
            "client_secret": context.get("client_secret", ""),
            "grant": "client_credentials",
        }
    elif scenario == "auth/wif-jwt-bearer":
        # A workload's identity token from its platform, in a file as platforms put it.
        token = os.path.join(work, "workload-token")
        with open(token, "w") as file:
            file.write(context["valid_jwt"])
        entry["oauth"] = {
            "client_id": context["client_id"],
            "assertion_file": token,
            "grant": "jwt_bearer",
        }
    elif scenario == "auth/enterprise-managed-authorization":
        # The user's ID token from the enterprise identity provider (SEP-990).
        entry["oauth"] = {
            "client_id": context["client_id"],
            "client_secret": context["client_secret"],
            "grant": "enterprise",
            "idp": {
                "issuer": context["idp_issuer"],
                "token_endpoint": context["idp_token_endpoint"],
                "client_id": context["idp_client_id"],
                "id_token": context["idp_id_token"],
            },
        }
    elif scenario.startswith("auth/"):
        oauth = {"client_metadata_url": CLIENT_METADATA_URL}
        if "client_id" in context:
            oauth["client_id"] = context["client_id"]
        if "client_secret" in context:
            oauth["client_secret"] = context["client_secret"]
        entry["oauth"] = oauth
    config = {
        "node": {"data_dir": os.path.join(work, "data")},
        "mcp_servers": {"conf": entry},
    }
    path = os.path.join(work, "config.yaml")
    with open(path, "w") as file:
        # JSON is YAML.
        json.dump(config, file)
    env = dict(os.environ)
    # The suite's authorization endpoint redirects at once: following it is the user's click.
    env["BROWSER"] = "curl --silent --fail --location --output /dev/null"

    def mew(*args: str) -> subprocess.CompletedProcess:
        command = [os.environ.get("MEW_BIN", "mew"), "--config", path, *args]
        done = subprocess.run(
            command, cwd=work, env=env, stdout=subprocess.PIPE, text=True
        )
        sys.stdout.write(done.stdout)
        return done

    def call(tool: str, arguments: dict, *flags: str) -> int:
        return mew("mcp", "call", "conf", tool, json.dumps(arguments), *flags).returncode

    def tools(*flags: str) -> list:
        done = mew("--json", "mcp", "tools", "conf", *flags)
        if done.returncode != 0:
            return []
        return json.loads(done.stdout)["tools"]

    prefix = "mcp__conf__"
    if unattended:
        listed = tools()
        if not listed:
            return 1
        return call(listed[0]["name"][len(prefix):], {})
    if scenario.startswith("auth/"):
        listed = tools("--login")
        if not listed:
            return 1
        return call(listed[0]["name"][len(prefix):], {}, "--login")
    if scenario == "sep-2640-client-no-prefetch":
        # Connecting and listing read no skill file.
        return mew("mcp", "skills", "conf").returncode
    if scenario.startswith("sep-2640-client-verify-"):
        # Loading the listed skill reads its SKILL.md, which the scenario has tampered with:
        # Mew must refuse it (exit 1) and read none of its other files.
        done = mew("--json", "mcp", "skills", "conf")
        if done.returncode != 0:
            return 1
        failed = 0
        for skill in json.loads(done.stdout)["skills"]:
            name = skill["name"].split(":", 1)[1]
            if mew("mcp", "skill", "conf", name).returncode == 0:
                failed = 1
                for file in skill["files"] or []:
                    mew("mcp", "skill", "conf", name, "--file", file["path"])
        return failed
    if scenario == "tools_call":
        return call("add_numbers", {"a": 5, "b": 3})
    if scenario == "elicitation-sep1034-client-defaults":
        return call("test_client_elicitation_defaults", {}, "--answer", "{}")
    if scenario == "sse-retry":
        return call("test_reconnection", {})
    if scenario == "sep-2322-client-request-state":
        failed = 0
        for tool in (
            "test_mrtr_echo_state",
            "test_mrtr_no_state",
            "test_mrtr_unrelated",
            "test_mrtr_no_result_type",
        ):
            failed |= call(tool, {}, "--answer", "{}")
        return failed
    if scenario == "http-custom-headers":
        failed = 0
        for tool_call in context.get("toolCalls", []):
            failed |= call(tool_call["name"], tool_call.get("arguments", {}))
        return failed
    if scenario == "http-invalid-tool-headers":
        return call("valid_tool", {})
    if scenario == "json-schema-2020-12-preservation":
        schema = next(
            (
                tool["inputSchema"]
                for tool in tools()
                if tool["name"] == prefix + "json_schema_2020_12_tool"
            ),
            None,
        )
        if schema is None:
            return 1
        return call("json_schema_echo", {"schema": schema})
    # initialize, request-metadata, http-standard-headers, json-schema-ref-no-deref, ...:
    # connect and list the tools.
    return mew("mcp", "tools", "conf").returncode


if __name__ == "__main__":
    sys.exit(main())
