//! `litek8s config show`: a daemon's flags merged from its configuration files, environment
//! and command line, printed as a configuration file with where each value came from.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, CommandFactory, Subcommand, ValueEnum};

use super::config_merge::{prepare, source_of};

/// `litek8s config …`
#[derive(Debug, Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    pub command: ConfigCommand,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print a daemon's merged configuration and where each value came from (FILE:LINE,
    /// flag, env NAME, default). Flags after the daemon's name are merged as it would merge
    /// them, e.g. `litek8s config show apiserver --listen 0.0.0.0:6443`.
    Show(ShowArgs),
}

/// The daemons that read configuration files.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Daemon {
    Apiserver,
    Agent,
    Lb,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Configuration file [default: /etc/litek8s/config.yaml].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// The daemon whose configuration to show.
    #[arg(value_enum)]
    pub daemon: Daemon,

    /// The daemon's flags, merged over the files.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "FLAGS"
    )]
    pub flags: Vec<OsString>,
}

/// Flags whose values are secrets: shown as set, never printed.
const SECRETS: [&str; 1] = ["token"];

impl ConfigArgs {
    pub fn run(self) -> anyhow::Result<()> {
        let ConfigCommand::Show(show) = self.command;
        print!("{}", show.render()?);
        Ok(())
    }
}

impl ShowArgs {
    /// The merged configuration as YAML with one `# source` comment per key.
    pub fn render(self) -> anyhow::Result<String> {
        let daemon = match self.daemon {
            Daemon::Apiserver => "apiserver",
            Daemon::Agent => "agent",
            Daemon::Lb => "lb",
        };
        let mut args: Vec<OsString> = vec!["litek8s".into(), daemon.into()];
        if let Some(config) = self.config {
            args.push("--config".into());
            args.push(config.into());
        }
        args.extend(self.flags);
        let prepared = prepare(&args, true)?;
        let mut command = prepared.command;
        command.build();
        let matches = command
            .clone()
            .try_get_matches_from(&args)
            .map_err(|e| anyhow::anyhow!("{}", e.to_string().lines().next().unwrap_or("")))?;
        let Some((_, sub_matches)) = matches.subcommand() else {
            anyhow::bail!("no daemon named");
        };
        let mut out = format!("# litek8s {daemon}: merged configuration\n");
        if prepared.files.is_empty() {
            out.push_str("# no configuration file read\n");
        }
        for file in &prepared.files {
            out.push_str(&format!("# read {}\n", file.display()));
        }
        // Setting a default moves a flag to the end of clap's list: list them in the order
        // the daemon declares them.
        let declared = super::Cli::command();
        let globals = declared
            .get_arguments()
            .filter(|a| a.is_global_set())
            .map(|a| (a.get_id().clone(), &matches));
        let Some(sub) = declared.find_subcommand(daemon) else {
            anyhow::bail!("no daemon named {daemon}");
        };
        let own = sub
            .get_arguments()
            .filter(|a| !a.is_global_set())
            .map(|a| (a.get_id().clone(), sub_matches));
        let merged_sub = command.find_subcommand(daemon);
        let mut lines = Vec::new();
        for (id, matches) in globals.chain(own) {
            let Some(arg) = command
                .get_arguments()
                .chain(merged_sub.into_iter().flat_map(|s| s.get_arguments()))
                .find(|a| *a.get_id() == id)
            else {
                continue;
            };
            let Some(key) = arg.get_long() else { continue };
            if matches!(key, "help" | "version" | "config") {
                continue;
            }
            let id = arg.get_id().as_str();
            let values: Vec<String> = matches
                .get_raw(id)
                .map(|raw| raw.map(|v| v.to_string_lossy().into_owned()).collect())
                .unwrap_or_default();
            let source = source_of(matches, arg, &prepared.origins);
            let (value, source) = match source {
                None => (String::new(), "not set".to_string()),
                Some(_) if SECRETS.contains(&key) => ("(hidden)".to_string(), "set".to_string()),
                Some(source) if matches!(arg.get_action(), clap::ArgAction::Append) => {
                    let items: Vec<String> = values.iter().map(|v| quoted(v)).collect();
                    (format!("[{}]", items.join(", ")), source)
                }
                Some(source) => (values.first().map_or(String::new(), |v| quoted(v)), source),
            };
            let left = if value.is_empty() {
                format!("{key}:")
            } else {
                format!("{key}: {value}")
            };
            lines.push((left, source));
        }
        let width = lines.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
        for (left, source) in lines {
            out.push_str(&format!("{left:<width$}  # {source}\n"));
        }
        Ok(out)
    }
}

/// `value` as a YAML scalar that reads back as the same text (a number or boolean read back
/// is turned into text again, so only YAML's syntax needs quoting).
fn quoted(value: &str) -> String {
    let plain = !value.is_empty()
        && !value.starts_with(|c: char| "[]{}#&*!|>'\"%@`,?:- ".contains(c))
        && !value.ends_with(' ')
        && !value.contains(": ")
        && !value.contains(" #");
    if plain {
        value.to_string()
    } else {
        serde_json::to_string(value).unwrap_or_else(|_| value.to_string())
    }
}
