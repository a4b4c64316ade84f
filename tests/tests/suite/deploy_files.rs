//! Every file of `deploy/` checked offline by the tool that knows its format, at the versions
//! `scripts/deploy-tools` installs: the Dockerfile by hadolint, the compose file by the
//! compose spec's schema and by `docker-compose config`, the Kubernetes manifests rendered by
//! `kubectl kustomize` and validated strictly, HAProxy's config by HAProxy, the systemd unit
//! by `systemd-analyze verify`, the shell scripts by shellcheck, the YAML by yamllint. Each
//! gate is also shown a broken file, to prove it refuses one.

use std::path::{Path, PathBuf};

use anyhow::{Context, ensure};
use mew_tests::node::mew_bin;
use mew_tests::process::{command, workspace_root};

/// `deploy/` in the repository.
fn deploy() -> PathBuf {
    workspace_root().join("deploy")
}

/// A validator from `.venv-deploy`, or the error that says how to get it.
fn venv_tool(name: &str) -> anyhow::Result<PathBuf> {
    let path = workspace_root().join(".venv-deploy/bin").join(name);
    ensure!(
        path.exists(),
        "{} is missing: run scripts/deploy-tools",
        path.display()
    );
    Ok(path)
}

/// A validator on the `PATH`, or the error that says how to get it.
fn system_tool(name: &str) -> anyhow::Result<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
        .with_context(|| format!("{name} is not installed: run scripts/deploy-tools"))
}

/// Runs `program` with `args` in `dir`: whether it exited 0, and what it printed.
async fn check(program: &Path, args: &[&str], dir: &Path) -> anyhow::Result<(bool, String)> {
    let output = command(program)
        .args(args)
        .current_dir(dir)
        .env("POSTGRES_PASSWORD", "only-for-the-check")
        .output()
        .await
        .with_context(|| format!("cannot run {}", program.display()))?;
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok((output.status.success(), printed))
}

/// A temporary directory holding `file` (named `name`) with `edit` applied to its text.
fn edited(
    file: &Path,
    name: &str,
    edit: impl Fn(String) -> String,
) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join(name), edit(std::fs::read_to_string(file)?))?;
    Ok(dir)
}

#[tokio::test]
async fn the_dockerfile_passes_hadolint() -> anyhow::Result<()> {
    let hadolint = venv_tool("hadolint")?;
    let file = deploy().join("docker/Dockerfile");
    let args = ["--failure-threshold", "info", "Dockerfile"];
    let (ok, printed) = check(&hadolint, &args, &deploy().join("docker")).await?;
    ensure!(ok, "hadolint:\n{printed}");
    // A user by name, not number, is what DL3066-style checks exist for; hadolint says so.
    let broken = edited(&file, "Dockerfile", |text| {
        text.replace("USER 65532:65532", "USER nonroot\nRUN apt-get install curl")
    })?;
    let (ok, printed) = check(&hadolint, &args, broken.path()).await?;
    ensure!(
        !ok && printed.contains("DL3"),
        "hadolint took a broken Dockerfile:\n{printed}"
    );
    Ok(())
}

#[tokio::test]
async fn the_compose_file_follows_the_compose_spec_and_docker_compose_reads_it()
-> anyhow::Result<()> {
    let schema = venv_tool("check-jsonschema")?;
    let compose = deploy().join("compose");
    let args = ["--builtin-schema", "vendor.compose-spec", "compose.yaml"];
    let (ok, printed) = check(&schema, &args, &compose).await?;
    ensure!(ok, "check-jsonschema:\n{printed}");
    let (ok, printed) = check(
        &system_tool("docker-compose")?,
        &["-f", "compose.yaml", "config", "-q"],
        &compose,
    )
    .await?;
    ensure!(ok, "docker-compose config:\n{printed}");
    let broken = edited(&compose.join("compose.yaml"), "compose.yaml", |text| {
        text.replace("stop_grace_period: 30s", "stop_grace_periods: 30s")
    })?;
    let (ok, printed) = check(&schema, &args, broken.path()).await?;
    ensure!(!ok, "the schema took an unknown key:\n{printed}");
    Ok(())
}

#[tokio::test]
async fn the_kubernetes_manifests_render_and_validate_strictly() -> anyhow::Result<()> {
    let validate = venv_tool("kubernetes-validate")?;
    let kubectl = system_tool("kubectl")?;
    // The overlay's Secret is made from files written at deploy time, never committed.
    let copy = tempfile::tempdir()?;
    mew_tests::example::copy_dir(&deploy().join("k8s"), copy.path())?;
    let overlay = copy.path().join("overlays/dev");
    std::fs::write(
        overlay.join("store-url"),
        "postgres://mew@db.example:5432/mew",
    )?;
    std::fs::write(overlay.join("store-password"), "not-a-real-password")?;
    let (ok, rendered) = check(&kubectl, &["kustomize", "overlays/dev"], copy.path()).await?;
    ensure!(ok, "kubectl kustomize:\n{rendered}");
    for kind in [
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "ConfigMap",
        "Secret",
        "ServiceAccount",
    ] {
        ensure!(
            rendered.contains(&format!("kind: {kind}\n")),
            "no {kind} rendered:\n{rendered}"
        );
    }
    for needed in [
        "readOnlyRootFilesystem: true",
        "runAsNonRoot: true",
        "type: RuntimeDefault",
        "maxUnavailable: 0",
        "fieldPath: metadata.name",
        "path: /readyz",
        "path: /healthz",
    ] {
        ensure!(
            rendered.contains(needed),
            "the rendered manifests lack {needed:?}"
        );
    }
    ensure!(
        !rendered.contains("not-a-real-password"),
        "the Secret's value is in clear text"
    );
    std::fs::write(copy.path().join("rendered.yaml"), &rendered)?;
    let args = ["--strict", "-k", "1.33.0", "rendered.yaml"];
    let (ok, printed) = check(&validate, &args, copy.path()).await?;
    ensure!(ok, "kubernetes-validate:\n{printed}");
    std::fs::write(
        copy.path().join("rendered.yaml"),
        rendered.replace("readinessProbe:", "readinesProbe:"),
    )?;
    let (ok, printed) = check(&validate, &args, copy.path()).await?;
    ensure!(!ok, "kubernetes-validate took a misspelled key:\n{printed}");
    Ok(())
}

#[tokio::test]
async fn haproxy_takes_the_load_balancer_config() -> anyhow::Result<()> {
    let haproxy = system_tool("haproxy")?;
    let compose = deploy().join("compose");
    let (ok, printed) = check(&haproxy, &["-c", "-f", "haproxy.cfg"], &compose).await?;
    ensure!(
        ok && printed.contains("Configuration file is valid"),
        "haproxy -c:\n{printed}"
    );
    let broken = edited(&compose.join("haproxy.cfg"), "haproxy.cfg", |text| {
        text.replace("balance leastconn", "balance fastest")
    })?;
    let (ok, printed) = check(&haproxy, &["-c", "-f", "haproxy.cfg"], broken.path()).await?;
    ensure!(!ok, "haproxy took an unknown algorithm:\n{printed}");
    Ok(())
}

#[tokio::test]
async fn the_systemd_unit_verifies() -> anyhow::Result<()> {
    let analyze = system_tool("systemd-analyze")?;
    // The unit runs /usr/local/bin/mew; verify checks that it exists, so point it at the build.
    let unit = deploy().join("systemd/mew.service");
    let bin = mew_bin()?.display().to_string();
    let dir = edited(&unit, "mew.service", |text| {
        text.replace("/usr/local/bin/mew", &bin)
    })?;
    let (ok, printed) = check(&analyze, &["verify", "./mew.service"], dir.path()).await?;
    ensure!(
        ok && printed.trim().is_empty(),
        "systemd-analyze verify:\n{printed}"
    );
    let broken = edited(&unit, "mew.service", |text| {
        text.replace("/usr/local/bin/mew", "/nonexistent/mew")
    })?;
    let (ok, printed) = check(&analyze, &["verify", "./mew.service"], broken.path()).await?;
    ensure!(
        !ok || !printed.trim().is_empty(),
        "systemd-analyze took a missing program:\n{printed}"
    );
    Ok(())
}

#[tokio::test]
async fn the_shell_scripts_pass_shellcheck() -> anyhow::Result<()> {
    let root = workspace_root();
    let mut scripts: Vec<String> = std::fs::read_dir(root.join("scripts"))?
        .map(|entry| Ok(format!("scripts/{}", entry?.file_name().to_string_lossy())))
        .collect::<anyhow::Result<_>>()?;
    scripts.sort();
    scripts.extend(
        [
            ".ci/run",
            "examples/wrap-cli/upper.sh",
            "examples/two-nodes/a/relay.sh",
        ]
        .map(str::to_owned),
    );
    let args: Vec<&str> = scripts.iter().map(String::as_str).collect();
    let (ok, printed) = check(&system_tool("shellcheck")?, &args, &root).await?;
    ensure!(ok, "shellcheck:\n{printed}");
    Ok(())
}

#[tokio::test]
async fn every_yaml_file_of_deploy_passes_yamllint() -> anyhow::Result<()> {
    let yamllint = venv_tool("yamllint")?;
    let rules = "{extends: default, rules: {line-length: {max: 100}, document-start: disable, comments: {min-spaces-from-content: 1}}}";
    let (ok, printed) = check(
        &yamllint,
        &["--strict", "-d", rules, "deploy"],
        &workspace_root(),
    )
    .await?;
    ensure!(ok, "yamllint:\n{printed}");
    Ok(())
}
