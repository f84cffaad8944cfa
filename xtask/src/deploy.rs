//! `cargo xtask dist`, `image` and `kubernetes`: what an operator installs, built and checked
//! here.
//!
//! - `dist`: `target/dist/unique-<version>-<arch>-linux.tar.gz` holding `bin/unique-server`,
//!   `bin/unique` (the CLI), the systemd unit, the Prometheus rules, the Grafana dashboard, the
//!   DynamoDB IAM policy and `SHA256SUMS`; then unpacked into a scratch directory, its sums
//!   checked and both binaries run (`--version`).
//! - `image`: an OCI image in `target/image/oci` (tag `<version>`), built without a daemon by
//!   umoci (Debian's `umoci`, installed when missing): no base image, only the two binaries, the
//!   shared libraries `ldd` lists for them, busybox's `wget` (Debian's `busybox-static`) for the
//!   health check, `/etc/passwd` and `/etc/group` naming user `unique` (10001), and `/data`, a
//!   volume holding the fjall store; port 7420. Then it is run: unpacked again with umoci, its
//!   entrypoint started as its user in a mount namespace rooted in the unpacked root
//!   filesystem (`unshare`), a user logged in through it with a real HTTP claim, the health
//!   check run inside it, and the store found under `/data`.
//! - `kubernetes`: `deploy/kubernetes` rendered by `kubectl kustomize` (or, without kubectl,
//!   by `check.py --render`), checked by `check.py` against `unique-server --help`, and
//!   validated by `kubernetes-validate --strict` (pinned, in a venv under `.tools/`).
//!
//! `--debug` (as `ci` runs them) takes the dev-profile binaries the test build made instead of
//! building release ones. Either way the tarball and the image carry stripped copies
//! (binutils' `strip`, installed when missing), in `target/<profile>/stripped/`: the release
//! profile keeps its line tables for profiling (`Cargo.toml`), which an installed binary does
//! not need.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::clients::{answers, apt_install, step};
use crate::{Run, cargo, go, root};

/// The project's version, the tarball's and the image tag's.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The binaries shipped: (package, binary).
const BINARIES: &[(&str, &str)] = &[("unique-server", "unique-server"), ("unique-cli", "unique")];

/// The deployment files shipped beside the binaries, from the workspace root.
const FILES: &[&str] = &[
    "deploy/systemd/unique-server.service",
    "deploy/prometheus/unique-rules.yml",
    "deploy/grafana/unique.json",
    "deploy/dynamodb/iam-policy.json",
    "LICENSE-APACHE",
    "LICENSE-MIT",
];

/// The image's user and group.
const IMAGE_USER: u32 = 10001;

/// The kubernetes-validate release `kubernetes` validates with.
const KUBERNETES_VALIDATE: &str = "1.37.0";

/// Whether to build release binaries or take the test build's.
fn profile(args: &[String]) -> Result<&'static str, String> {
    match args {
        [] => Ok("release"),
        [flag] if flag == "--debug" => Ok("debug"),
        other => Err(format!("unknown arguments {other:?} (only --debug)")),
    }
}

/// Stripped copies of the binaries of `profile`, built first for release.
fn binaries(run: &mut Run, profile: &str) -> Option<Vec<PathBuf>> {
    if !answers("strip", &["--version"]) {
        apt_install(run, &["binutils"]);
    }
    let mut build = cargo(&["build"]);
    if profile == "release" {
        build.arg("--release");
    }
    for (package, bin) in BINARIES {
        build.args(["-p", package, "--bin", bin]);
    }
    if !step(
        run,
        &format!("build unique-server and unique ({profile})"),
        build,
    ) {
        return None;
    }
    let dir = go::target_dir().join(profile);
    let stripped = dir.join("stripped");
    let mut bins = Vec::new();
    for (_, bin) in BINARIES {
        let copied = stripped.join(bin);
        let result = copy(&dir.join(bin), &copied).and_then(|()| {
            run_output(Command::new("strip").arg(&copied))?;
            let size = std::fs::metadata(&copied).map_err(|e| e.to_string())?.len();
            eprintln!("{bin}: {} KiB stripped", size >> 10);
            Ok(())
        });
        if let Err(e) = result {
            eprintln!("xtask: cannot strip {bin}: {e}");
            run.record(&format!("strip {bin}"), false, Duration::ZERO);
            return None;
        }
        bins.push(copied);
    }
    Some(bins)
}

pub(crate) fn dist(run: &mut Run, args: &[String]) -> Result<(), String> {
    let profile = profile(args)?;
    let Some(bins) = binaries(run, profile) else {
        return Ok(());
    };
    let name = "dist: the tarball (binaries, unit, rules, dashboard, IAM policy, SHA256SUMS), unpacked and run";
    eprintln!("\n==> xtask: {name}");
    let started = Instant::now();
    let result = write_tarball(&bins).and_then(|tarball| {
        check_tarball(&tarball)?;
        eprintln!("wrote {}", tarball.display());
        Ok(())
    });
    if let Err(e) = &result {
        eprintln!("xtask: {e}");
    }
    run.record(name, result.is_ok(), started.elapsed());
    Ok(())
}

fn stem() -> String {
    format!("unique-{VERSION}-{}-linux", std::env::consts::ARCH)
}

fn write_tarball(bins: &[PathBuf]) -> Result<PathBuf, String> {
    let dist = go::target_dir().join("dist");
    let top = dist.join(stem());
    if top.exists() {
        std::fs::remove_dir_all(&top)
            .map_err(|e| format!("cannot clear {}: {e}", top.display()))?;
    }
    let mut listed = Vec::new();
    for bin in bins {
        let to = format!("bin/{}", bin.file_name().unwrap().to_string_lossy());
        copy(bin, &top.join(&to))?;
        listed.push(to);
    }
    for file in FILES {
        copy(&root().join(file), &top.join(file))?;
        listed.push((*file).to_owned());
    }
    let sums = run_output(Command::new("sha256sum").args(&listed).current_dir(&top))?;
    std::fs::write(top.join("SHA256SUMS"), sums).map_err(|e| e.to_string())?;
    let tarball = dist.join(format!("{}.tar.gz", stem()));
    run_output(
        Command::new("tar")
            .args(["--owner=0", "--group=0", "--numeric-owner", "-czf"])
            .arg(&tarball)
            .arg(stem())
            .current_dir(&dist),
    )?;
    Ok(tarball)
}

/// Unpacks the tarball in a scratch directory, checks its sums and runs both binaries.
fn check_tarball(tarball: &Path) -> Result<(), String> {
    let scratch = go::target_dir().join("dist").join("check");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).map_err(|e| e.to_string())?;
    run_output(
        Command::new("tar")
            .arg("-xzf")
            .arg(tarball)
            .current_dir(&scratch),
    )?;
    let top = scratch.join(stem());
    run_output(
        Command::new("sha256sum")
            .args(["--check", "--quiet", "SHA256SUMS"])
            .current_dir(&top),
    )?;
    for (_, bin) in BINARIES {
        let version = run_output(Command::new(top.join("bin").join(bin)).arg("--version"))?;
        if !version.contains(VERSION) {
            return Err(format!(
                "{bin} --version printed {version:?}, not {VERSION}"
            ));
        }
    }
    Ok(())
}

pub(crate) fn image(run: &mut Run, args: &[String]) -> Result<(), String> {
    let profile = profile(args)?;
    if !answers("umoci", &["--version"]) || !Path::new(BUSYBOX).is_file() {
        apt_install(run, &["umoci", "busybox-static"]);
    }
    let Some(bins) = binaries(run, profile) else {
        return Ok(());
    };
    let name = format!("image: the OCI image (umoci, no base image) in target/image/oci:{VERSION}");
    eprintln!("\n==> xtask: {name}");
    let started = Instant::now();
    let built = build_image(&bins);
    if let Err(e) = &built {
        eprintln!("xtask: {e}");
    }
    run.record(&name, built.is_ok(), started.elapsed());
    let Ok(layout) = built else {
        return Ok(());
    };
    let name = "image run: its entrypoint in a mount namespace as its user, a real claim through it, its health check";
    eprintln!("\n==> xtask: {name}");
    let started = Instant::now();
    let ran = run_image(&layout);
    match &ran {
        Ok(said) => eprintln!("{said}"),
        Err(e) => eprintln!("xtask: {e}"),
    }
    run.record(name, ran.is_ok(), started.elapsed());
    Ok(())
}

/// Debian's busybox-static, whose `wget` applet is the image's health check.
const BUSYBOX: &str = "/bin/busybox";

/// The health check: what `podman run --health-cmd` or a Docker `HEALTHCHECK` runs (OCI image
/// configs have no field for it; the image carries it as a label).
const HEALTH_CMD: &str = "/usr/local/bin/wget -q --spider http://127.0.0.1:7420/readyz";

fn umoci(args: &[&str], image: &str) -> Result<String, String> {
    let mut cmd = Command::new("umoci");
    cmd.args(args).arg("--image").arg(image);
    run_output(&mut cmd)
}

fn build_image(bins: &[PathBuf]) -> Result<PathBuf, String> {
    let dir = go::target_dir().join("image");
    let layout = dir.join("oci");
    let bundle = dir.join("bundle");
    for old in [&layout, &bundle] {
        if old.exists() {
            std::fs::remove_dir_all(old)
                .map_err(|e| format!("cannot clear {}: {e}", old.display()))?;
        }
    }
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let image = format!("{}:{VERSION}", layout.display());
    run_output(
        Command::new("umoci")
            .args(["init", "--layout"])
            .arg(&layout),
    )?;
    run_output(Command::new("umoci").args(["new", "--image", &image]))?;
    run_output(
        Command::new("umoci")
            .args(["unpack", "--image", &image])
            .arg(&bundle),
    )?;
    let rootfs = bundle.join("rootfs");
    fill_rootfs(&rootfs, bins)?;
    run_output(
        Command::new("umoci")
            .args(["repack", "--image", &image])
            .arg(&bundle),
    )?;
    let user = format!("{IMAGE_USER}:{IMAGE_USER}");
    let health = format!("io.unique.healthcheck={HEALTH_CMD}");
    let version = format!("org.opencontainers.image.version={VERSION}");
    umoci(
        &[
            "config",
            "--config.user",
            &user,
            "--config.exposedports",
            "7420/tcp",
            "--config.volume",
            "/data",
            "--config.workingdir",
            "/data",
            "--config.entrypoint",
            "/usr/local/bin/unique-server",
            "--config.env",
            "UNIQUE_LISTEN=0.0.0.0:7420",
            "--config.env",
            "UNIQUE_STORE=fjall",
            "--config.env",
            "UNIQUE_FJALL_DIR=/data/unique.fjall",
            "--config.env",
            "UNIQUE_LOG_FORMAT=json",
            "--config.label",
            &health,
            "--config.label",
            &version,
            "--config.label",
            "org.opencontainers.image.title=unique-server",
        ],
        &image,
    )?;
    run_output(Command::new("umoci").args(["gc", "--layout"]).arg(&layout))?;
    std::fs::remove_dir_all(&bundle).map_err(|e| e.to_string())?;
    let size = run_output(Command::new("du").args(["-sh"]).arg(&layout))?;
    eprintln!(
        "image {image}: {}",
        size.split_whitespace().next().unwrap_or("?")
    );
    Ok(layout)
}

/// The image's files: the binaries, their shared libraries (as `ldd` resolves them, at the
/// same paths), busybox as `wget`, the user and group files, `/data` (the user's, 0700),
/// `/tmp` and `/proc` (mount points).
fn fill_rootfs(rootfs: &Path, bins: &[PathBuf]) -> Result<(), String> {
    let local_bin = rootfs.join("usr/local/bin");
    for bin in bins {
        copy(bin, &local_bin.join(bin.file_name().unwrap()))?;
        let ldd = run_output(Command::new("ldd").arg(bin))?;
        for lib in ldd.split_whitespace().filter(|word| word.starts_with('/')) {
            let target = rootfs.join(lib.trim_start_matches('/'));
            if !target.exists() {
                copy(Path::new(lib), &target)?;
            }
        }
    }
    copy(Path::new(BUSYBOX), &local_bin.join("busybox"))?;
    std::os::unix::fs::symlink("busybox", local_bin.join("wget")).map_err(|e| e.to_string())?;
    let etc = rootfs.join("etc");
    std::fs::create_dir_all(&etc).map_err(|e| e.to_string())?;
    std::fs::write(
        etc.join("passwd"),
        format!("root:x:0:0:root:/:/sbin/nologin\nunique:x:{IMAGE_USER}:{IMAGE_USER}:unique:/data:/sbin/nologin\n"),
    )
    .map_err(|e| e.to_string())?;
    std::fs::write(
        etc.join("group"),
        format!("root:x:0:\nunique:x:{IMAGE_USER}:\n"),
    )
    .map_err(|e| e.to_string())?;
    for (dir, mode) in [("data", "0700"), ("tmp", "1777"), ("proc", "0555")] {
        let path = rootfs.join(dir);
        std::fs::create_dir_all(&path).map_err(|e| e.to_string())?;
        run_output(Command::new("chmod").arg(mode).arg(&path))?;
    }
    let owner = format!("{IMAGE_USER}:{IMAGE_USER}");
    run_output(Command::new("chown").arg(owner).arg(rootfs.join("data")))?;
    Ok(())
}

/// Unpacks the image with umoci and runs it as its runtime config says, listening on a free
/// loopback port instead of 0.0.0.0:7420 (as `podman run -e UNIQUE_LISTEN=...` would).
fn run_image(layout: &Path) -> Result<String, String> {
    let bundle = layout.with_file_name("run");
    if bundle.exists() {
        std::fs::remove_dir_all(&bundle).map_err(|e| e.to_string())?;
    }
    let image = format!("{}:{VERSION}", layout.display());
    run_output(
        Command::new("umoci")
            .args(["unpack", "--image", &image])
            .arg(&bundle),
    )?;
    let config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(bundle.join("config.json")).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    let process = &config["process"];
    let uid = process["user"]["uid"].as_u64().unwrap_or(0);
    if uid == 0 {
        return Err("the image runs as root".into());
    }
    let gid = process["user"]["gid"].as_u64().unwrap_or(0);
    let args: Vec<&str> = process["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str())
        .collect();
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let rootfs = bundle.join("rootfs");
    let in_image = |cmd: &mut Command| {
        // No --fork: unshare execs the command itself, so killing the child kills the server.
        cmd.arg("--mount")
            // Mounted after the root is changed: a path inside the image.
            .arg("--mount-proc=/proc")
            .arg(format!("--root={}", rootfs.display()))
            .arg(format!("--setuid={uid}"))
            .arg(format!("--setgid={gid}"));
    };
    let mut server = Command::new("unshare");
    in_image(&mut server);
    server
        .arg(format!("--wd={}", process["cwd"].as_str().unwrap_or("/")))
        .arg("--")
        .args(&args)
        .env_clear()
        .envs(
            process["env"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| e.as_str()?.split_once('=')),
        )
        .env("UNIQUE_LISTEN", format!("127.0.0.1:{port}"))
        .stdout(Stdio::null());
    let mut child = server
        .spawn()
        .map_err(|e| format!("cannot start unshare: {e}"))?;
    let result = (|| {
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(&addr).is_err() {
            if Instant::now() > deadline || child.try_wait().map_err(|e| e.to_string())?.is_some() {
                return Err("the image's server never listened".to_owned());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let claim = r#"{"project":"game","env":"prod","uid":42,"owner":{"region":"eu","cluster":"c1","endpoint":"http://127.0.0.1:9/kick"},"claim_id":"image-login-1"}"#;
        let answer = post(&addr, "/v1/claim", claim)?;
        if !answer.starts_with("HTTP/1.1 200") || !answer.contains("\"gen\":1") {
            return Err(format!("the claim through the image answered:\n{answer}"));
        }
        let mut health = Command::new("unshare");
        in_image(&mut health);
        let health_cmd = HEALTH_CMD.replace("7420", &port.to_string());
        health.arg("--").args(health_cmd.split(' '));
        run_output(&mut health).map_err(|e| format!("the health check failed: {e}"))?;
        if !rootfs.join("data/unique.fjall").is_dir() {
            return Err("no fjall store under /data".into());
        }
        Ok(format!(
            "the image answered the claim with gen 1 on {addr} as uid {uid}; its health check passed; the store is in /data"
        ))
    })();
    let _ = child.kill();
    let _ = child.wait();
    result
}

fn post(addr: &str, path: &str, body: &str) -> Result<String, String> {
    let mut stream = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .map_err(|e| e.to_string())?;
    Ok(answer)
}

pub(crate) fn kubernetes(run: &mut Run) {
    let Some(python) = kubernetes_validate(run) else {
        return;
    };
    if !step(
        run,
        "kubernetes: build unique-server (its --help lists the variables)",
        cargo(&["build", "-p", "unique-server", "--bin", "unique-server"]),
    ) {
        return;
    }
    let name = "kubernetes: deploy/kubernetes rendered (kubectl kustomize), checked against unique-server, kubernetes-validate --strict";
    eprintln!("\n==> xtask: {name}");
    let started = Instant::now();
    let result = check_kubernetes(&python);
    if let Err(e) = &result {
        eprintln!("xtask: {e}");
    }
    run.record(name, result.is_ok(), started.elapsed());
}

fn check_kubernetes(python: &Path) -> Result<(), String> {
    let dir = go::target_dir().join("kubernetes");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let rendered = dir.join("rendered.yaml");
    let source = root().join("deploy/kubernetes");
    if answers("kubectl", &["version", "--client"]) {
        let yaml = run_output(Command::new("kubectl").arg("kustomize").arg(&source))?;
        std::fs::write(&rendered, yaml).map_err(|e| e.to_string())?;
    } else {
        eprintln!("no kubectl: rendering with check.py --render");
        run_output(
            Command::new(python)
                .arg(source.join("check.py"))
                .arg("--render")
                .arg(&source)
                .arg(&rendered),
        )?;
    }
    let help =
        run_output(Command::new(go::target_dir().join("debug/unique-server")).arg("--help"))?;
    let help_file = dir.join("unique-server-help.txt");
    std::fs::write(&help_file, help).map_err(|e| e.to_string())?;
    eprint!(
        "{}",
        run_output(
            Command::new(python)
                .arg(source.join("check.py"))
                .arg(&rendered)
                .arg(&help_file)
        )?
    );
    let validate = python.with_file_name("kubernetes-validate");
    eprint!(
        "{}",
        run_output(Command::new(validate).args(["--strict"]).arg(&rendered))?
    );
    Ok(())
}

/// The venv's python holding the pinned kubernetes-validate (and PyYAML, its dependency).
fn kubernetes_validate(run: &mut Run) -> Option<PathBuf> {
    let venv = root()
        .join(".tools")
        .join(format!("kubernetes-validate-{KUBERNETES_VALIDATE}"));
    let python = venv.join("bin").join("python");
    let stamp = venv.join("installed");
    if stamp.is_file() {
        return Some(python);
    }
    if !answers("python3", &["-c", "import venv, ensurepip"]) {
        apt_install(run, &["python3", "python3-venv"]);
    }
    let _ = std::fs::remove_dir_all(&venv);
    let mut make = Command::new("python3");
    make.args(["-m", "venv"]).arg(&venv);
    if !step(run, "kubernetes: python3 -m venv", make) {
        return None;
    }
    let mut pip = Command::new(venv.join("bin").join("pip"));
    pip.args(["install", "--quiet", "--disable-pip-version-check"])
        .arg(format!("kubernetes-validate=={KUBERNETES_VALIDATE}"));
    if !step(
        run,
        &format!("kubernetes: pip install kubernetes-validate=={KUBERNETES_VALIDATE}"),
        pip,
    ) {
        return None;
    }
    let _ = std::fs::write(&stamp, KUBERNETES_VALIDATE);
    Some(python)
}

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    std::fs::copy(from, to)
        .map(drop)
        .map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), to.display()))
}

/// What `cmd` printed on stdout, or an error with its stderr when it fails.
fn run_output(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{cmd:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}
