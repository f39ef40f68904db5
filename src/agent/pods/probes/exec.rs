//! exec probes: the command run in the container; exit code 0 is success, any other a
//! failure whose output (stdout then stderr, at most 10 KiB) is the message. A command still
//! running at the timeout is killed and fails (`command "…" timed out`); one the runtime
//! could not start at all (the container gone, the binary missing) is an error, as kubelet
//! treats a failed exec.

use std::future::Future;
use std::time::Duration;

use super::Outcome;
use crate::agent::runtime::{ExecOutput, Runtime, RuntimeError};

/// kubelet keeps this much of an exec probe's output.
const MAX_OUTPUT: usize = 10 * 1024;

/// Runs a command in a container ([`Runtime::exec`]; tests script it).
pub trait ExecRunner: Send + Sync + 'static {
    fn exec(
        &self,
        container_id: &str,
        argv: &[String],
        timeout: Duration,
    ) -> impl Future<Output = Result<ExecOutput, RuntimeError>> + Send;
}

impl ExecRunner for Runtime {
    async fn exec(
        &self,
        container_id: &str,
        argv: &[String],
        timeout: Duration,
    ) -> Result<ExecOutput, RuntimeError> {
        Runtime::exec(self, container_id, argv, timeout).await
    }
}

/// One run of an exec probe.
pub async fn run<E: ExecRunner>(
    runner: &E,
    container_id: &str,
    command: &[String],
    timeout: Duration,
) -> Outcome {
    match runner.exec(container_id, command, timeout).await {
        Ok(out) => {
            let mut text = out.stdout;
            text.push_str(&out.stderr);
            if text.len() > MAX_OUTPUT {
                let mut cut = MAX_OUTPUT;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
            }
            if out.exit_code == 0 {
                Outcome::Success(text)
            } else {
                Outcome::Failure(text)
            }
        }
        Err(RuntimeError::Timeout { .. }) => {
            Outcome::Failure(format!("command {:?} timed out", command.join(" ")))
        }
        Err(e) => Outcome::Error(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Result<ExecOutput, fn() -> RuntimeError>);

    impl ExecRunner for Fixed {
        async fn exec(
            &self,
            _: &str,
            _: &[String],
            _: Duration,
        ) -> Result<ExecOutput, RuntimeError> {
            self.0.clone().map_err(|f| f())
        }
    }

    fn out(code: i32, stdout: &str, stderr: &str) -> Fixed {
        Fixed(Ok(ExecOutput {
            exit_code: code,
            stdout: stdout.into(),
            stderr: stderr.into(),
        }))
    }

    #[tokio::test]
    async fn exit_codes_timeouts_and_errors() {
        let cmd = vec!["sh".to_string(), "-c".into(), "check".into()];
        let t = Duration::from_secs(1);
        assert_eq!(
            run(&out(0, "ok\n", ""), "c", &cmd, t).await,
            Outcome::Success("ok\n".into())
        );
        assert_eq!(
            run(&out(1, "out ", "err"), "c", &cmd, t).await,
            Outcome::Failure("out err".into())
        );
        let long = "é".repeat(MAX_OUTPUT);
        match run(&out(2, &long, ""), "c", &cmd, t).await {
            Outcome::Failure(text) => {
                assert!(text.len() <= MAX_OUTPUT && text.len() > MAX_OUTPUT - 2)
            }
            other => panic!("{other:?}"),
        }
        let timeout = Fixed(Err(|| RuntimeError::Timeout {
            what: "x".into(),
            after: Duration::from_secs(1),
        }));
        assert_eq!(
            run(&timeout, "c", &cmd, t).await,
            Outcome::Failure("command \"sh -c check\" timed out".into())
        );
        let refused = Fixed(Err(|| RuntimeError::NotFound("c".into())));
        assert_eq!(
            run(&refused, "c", &cmd, t).await,
            Outcome::Error("container c not found".into())
        );
    }
}
