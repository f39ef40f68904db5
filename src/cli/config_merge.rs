//! Configuration files at the level of clap: the files' values become the defaults of the
//! daemon's flags, so a flag on the command line, then its environment variable, win over
//! the files, which win over the built-in defaults — with no flag described twice.
//!
//! Each value is checked here with the flag's own value parser, so a wrong type is reported
//! with the file and line that wrote it rather than as a flag error. A key that is a flag of
//! another daemon (`data-dir` read by `lb`) is skipped: one `/etc/litek8s/config.yaml` serves
//! the server and the agent of a host. A key that is no daemon's flag is an error.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command, CommandFactory, FromArgMatches};

use super::agent::{AgentArgs, AgentCli};
use super::config_file::{ConfigError, Entry, FileConfig, Origin, DEFAULT_CONFIG};
use super::Cli;

/// The subcommands that read configuration files.
pub const DAEMONS: [&str; 3] = ["apiserver", "agent", "lb"];

/// Why the command line could not become a `Cli`.
#[derive(Debug)]
pub enum ParseError {
    /// clap's own error (also `--help` and `--version`, which are not failures).
    Usage(clap::Error),
    Config(ConfigError),
}

/// The command, with the files' values as defaults, and what the files set.
pub struct Prepared {
    pub command: Command,
    /// The daemon whose flags the files filled, if the command line names one.
    pub daemon: Option<String>,
    /// Origins of the values the files set, by argument id.
    pub origins: HashMap<String, Vec<Origin>>,
    pub files: Vec<PathBuf>,
}

/// Parses the command line, with the configuration files of the daemon it runs.
pub fn parse(args: Vec<OsString>) -> Result<Cli, ParseError> {
    let prepared = prepare(&args, false).map_err(ParseError::Config)?;
    let matches = prepared
        .command
        .try_get_matches_from(args)
        .map_err(ParseError::Usage)?;
    Cli::from_arg_matches(&matches).map_err(ParseError::Usage)
}

/// Parses the command line of the `litek8s-agent` executable: the flags of `litek8s agent`,
/// with its configuration files, read as `litek8s agent` reads them.
pub fn parse_agent(args: Vec<OsString>) -> Result<AgentCli, ParseError> {
    // The files apply to the agent subcommand of the whole command, which also knows the
    // other daemons' flags (keys a shared file may hold for them are skipped).
    let mut as_subcommand = args.clone();
    let program = if as_subcommand.is_empty() {
        OsString::from("litek8s-agent")
    } else {
        as_subcommand.remove(0)
    };
    as_subcommand.splice(0..0, [program, OsString::from("agent")]);
    let prepared = prepare(&as_subcommand, false).map_err(ParseError::Config)?;
    let matches = agent_command(prepared.command)
        .try_get_matches_from(args)
        .map_err(ParseError::Usage)?;
    let log_level = matches
        .get_one::<String>(LOG_LEVEL)
        .cloned()
        .unwrap_or_else(|| "info".to_string());
    let args = AgentArgs::from_arg_matches(&matches).map_err(ParseError::Usage)?;
    Ok(AgentCli { log_level, args })
}

/// The id of the global `--log-level` (the field's name in `Cli`).
const LOG_LEVEL: &str = "log_level";

/// The `agent` subcommand of `command` as a command of its own, `litek8s-agent`, with the
/// global `--log-level` (its default set by the files too).
fn agent_command(command: Command) -> Command {
    let log_level = command
        .get_arguments()
        .find(|a| a.get_id() == LOG_LEVEL)
        .cloned();
    let agent = command
        .find_subcommand("agent")
        .cloned()
        .unwrap_or_else(|| Command::new("agent"));
    let long_about = super::agent::LONG_ABOUT.replace("litek8s agent", "litek8s-agent");
    let agent = agent
        .name("litek8s-agent")
        .bin_name("litek8s-agent")
        .version(env!("CARGO_PKG_VERSION"))
        .long_about(long_about);
    match log_level {
        Some(arg) => agent.arg(arg.global(false)),
        None => agent,
    }
}

/// `litek8s` with `--config` on every daemon. `relaxed` makes every flag optional (to read
/// `--config` before the files supply required flags, and for `config show`).
fn base_command(relaxed: bool) -> Command {
    let mut command = Cli::command();
    for daemon in DAEMONS {
        command = command.mut_subcommand(daemon, |sub| {
            let sub = sub.arg(
                Arg::new("config")
                    .long("config")
                    .value_name("FILE")
                    .value_parser(clap::value_parser!(PathBuf))
                    .help(format!(
                        "Configuration file: keys are flag names without --; drop-ins are read \
                         from FILE.d/*.yaml by name; flags and environment win \
                         [default: {DEFAULT_CONFIG}]"
                    )),
            );
            if relaxed {
                sub.mut_args(|a| a.required(false))
            } else {
                sub
            }
        });
    }
    command
}

/// Reads the configuration files of the daemon `args` names and makes their values the
/// defaults of its flags. A command line clap refuses is left for the real parse to report.
pub fn prepare(args: &[OsString], relaxed: bool) -> Result<Prepared, ConfigError> {
    let command = base_command(relaxed);
    let mut prepared = Prepared {
        command: command.clone(),
        daemon: None,
        origins: HashMap::new(),
        files: Vec::new(),
    };
    let Ok(matches) = base_command(true).try_get_matches_from(args) else {
        return Ok(prepared);
    };
    let Some((daemon, sub)) = matches.subcommand() else {
        return Ok(prepared);
    };
    if !DAEMONS.contains(&daemon) {
        return Ok(prepared);
    }
    let (path, explicit) = match sub.get_one::<PathBuf>("config") {
        Some(path) => (path.clone(), true),
        None => (PathBuf::from(DEFAULT_CONFIG), false),
    };
    let files = FileConfig::load(&path, explicit)?;
    let (command, origins) = apply(command, daemon, &files)?;
    prepared.command = command;
    prepared.daemon = Some(daemon.to_string());
    prepared.origins = origins;
    prepared.files = files.files;
    Ok(prepared)
}

type Origins = HashMap<String, Vec<Origin>>;

/// Sets the files' values as the defaults of `daemon`'s flags (and of the global flags).
fn apply(
    mut command: Command,
    daemon: &str,
    files: &FileConfig,
) -> Result<(Command, Origins), ConfigError> {
    let mut origins = HashMap::new();
    for entry in &files.entries {
        let invalid = |message: String| ConfigError::Invalid {
            origin: entry.origins[entry.origins.len() - 1].clone(),
            message,
        };
        if entry.key == "config" {
            return Err(invalid(
                "config: a configuration file cannot name another".into(),
            ));
        }
        let global = command
            .get_arguments()
            .find(|a| a.is_global_set() && a.get_long() == Some(entry.key.as_str()))
            .cloned();
        let own = command
            .find_subcommand(daemon)
            .and_then(|sub| {
                sub.get_arguments()
                    .find(|a| a.get_long() == Some(entry.key.as_str()))
            })
            .cloned();
        let Some(arg) = global.clone().or(own) else {
            if known_to_a_daemon(&command, &entry.key) {
                continue;
            }
            return Err(invalid(format!(
                "unknown key {:?}: not a flag of litek8s {}",
                entry.key,
                DAEMONS.join(", ")
            )));
        };
        let values = checked_values(&arg, entry).map_err(invalid)?;
        let id = arg.get_id().to_string();
        origins.insert(id.clone(), entry.origins.clone());
        let set = move |a: Arg| {
            let a = a.required(false);
            if values.len() == 1 {
                a.default_value(values[0].clone())
            } else {
                a.default_values(values)
            }
        };
        command = if global.is_some() {
            command.mut_arg(id, set)
        } else {
            command.mut_subcommand(daemon, |sub| sub.mut_arg(id, set))
        };
    }
    Ok((command, origins))
}

fn known_to_a_daemon(command: &Command, key: &str) -> bool {
    DAEMONS.iter().any(|daemon| {
        command
            .find_subcommand(daemon)
            .is_some_and(|sub| sub.get_arguments().any(|a| a.get_long() == Some(key)))
    })
}

/// The entry's values as the flag takes them, or why they do not fit it.
fn checked_values(arg: &Arg, entry: &Entry) -> Result<Vec<String>, String> {
    let key = &entry.key;
    let repeatable = matches!(arg.get_action(), ArgAction::Append);
    if entry.appended && !repeatable {
        return Err(format!(
            "{key}+: only a repeatable flag's values can be appended"
        ));
    }
    if matches!(arg.get_action(), ArgAction::SetTrue) {
        return match (entry.list, entry.values.as_slice()) {
            (false, [value]) if value.boolean.is_some() => Ok(vec![value.text.clone()]),
            _ => Err(format!("{key}: expected true or false")),
        };
    }
    if entry.list && !repeatable {
        return Err(format!("{key}: takes one value, not a list"));
    }
    let mut values = Vec::with_capacity(entry.values.len());
    for value in &entry.values {
        check_value(arg, &value.text)
            .map_err(|reason| format!("{key}: invalid value {:?}: {reason}", value.text))?;
        values.push(value.text.clone());
    }
    Ok(values)
}

/// Runs the flag's value parser on `value` alone.
fn check_value(arg: &Arg, value: &str) -> Result<(), String> {
    let probe = Arg::new("value")
        .long("value")
        .action(ArgAction::Set)
        .value_parser(arg.get_value_parser().clone());
    match Command::new("probe")
        .no_binary_name(true)
        .arg(probe)
        .try_get_matches_from([format!("--value={value}")])
    {
        Ok(_) => Ok(()),
        Err(e) => Err(match std::error::Error::source(&e) {
            Some(reason) => reason.to_string(),
            None => {
                let text = e.to_string();
                let line = text.lines().next().unwrap_or_default();
                line.trim_start_matches("error: ")
                    .replace(" for '--value <value>'", "")
            }
        }),
    }
}

/// Where the value of the argument `id` came from.
pub fn source_of(matches: &ArgMatches, arg: &Arg, origins: &Origins) -> Option<String> {
    let id = arg.get_id().as_str();
    Some(match matches.value_source(id)? {
        ValueSource::CommandLine => "flag".to_string(),
        ValueSource::EnvVariable => match arg.get_env() {
            Some(name) => format!("env {}", name.to_string_lossy()),
            None => "env".to_string(),
        },
        ValueSource::DefaultValue => match origins.get(id) {
            Some(lines) => lines
                .iter()
                .map(Origin::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            None => "default".to_string(),
        },
        _ => "unknown".to_string(),
    })
}
