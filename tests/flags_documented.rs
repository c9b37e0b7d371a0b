//! Every flag of every command is documented where a user looks for it: docs/cli.md has a
//! section per command (`## \`coloc-extender serve\``, …, `## \`coloc-demo\``) whose table
//! has a row per flag, naming its default (`none` for an empty one) and the environment
//! variable it reads. A flag added without its row, a default changed without the doc, or
//! a row left for a flag that is gone fails here. Hidden flags (for tests) are left out.

use std::collections::BTreeMap;

use clap::CommandFactory;

fn reference() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cli.md")).unwrap()
}

/// The text of the section titled `` `title` ``, up to the next section.
fn section<'d>(doc: &'d str, title: &str) -> Option<&'d str> {
    let heading = format!("\n## `{title}`\n");
    let start = doc.find(&heading)? + heading.len();
    Some(doc[start..].split("\n## ").next().unwrap_or_default())
}

/// The section's table rows by the flag they start with (`` | `--flag VALUE` | ``).
fn rows(section: &str) -> BTreeMap<String, &str> {
    section
        .lines()
        .filter_map(|line| {
            let flag = line.strip_prefix("| `--")?;
            let name: String = flag.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
            Some((format!("--{name}"), line))
        })
        .collect()
}

/// What docs/cli.md does not say of `command`'s flags, as `title` is called.
fn undocumented(doc: &str, title: &str, command: &clap::Command) -> Vec<String> {
    let Some(text) = section(doc, title) else {
        return vec![format!("docs/cli.md has no section \"## `{title}`\"")];
    };
    let rows = rows(text);
    let mut problems = Vec::new();
    let mut taken = Vec::new();
    for arg in command.get_arguments().filter(|a| !a.is_hide_set()) {
        let Some(long) = arg.get_long() else { continue };
        if matches!(long, "help" | "version") {
            continue;
        }
        let flag = format!("--{long}");
        taken.push(flag.clone());
        let Some(row) = rows.get(&flag) else {
            problems.push(format!("`{title}` takes {flag}: docs/cli.md has no row for it"));
            continue;
        };
        for default in arg.get_default_values() {
            let default = default.to_string_lossy();
            let said = if default.is_empty() { "| none |".to_string() } else { format!("`{default}`") };
            if !row.contains(&said) {
                problems.push(format!("`{title}` {flag} defaults to `{default}`: its row does not say so"));
            }
        }
        if let Some(env) = arg.get_env() {
            let env = format!("${}", env.to_string_lossy());
            if !row.contains(&env) {
                problems.push(format!("`{title}` {flag} reads {env}: its row does not say so"));
            }
        }
    }
    for flag in rows.keys().filter(|f| !taken.contains(f)) {
        problems.push(format!("docs/cli.md lists {flag} under `{title}`, which takes no such flag"));
    }
    problems
}

#[test]
fn every_flag_of_every_subcommand_is_in_the_reference() {
    let doc = reference();
    let cli = coloc_extender::cli::Cli::command();
    let mut problems = Vec::new();
    for sub in cli.get_subcommands() {
        problems.extend(undocumented(&doc, &format!("coloc-extender {}", sub.get_name()), sub));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_flag_of_coloc_demo_is_in_the_reference() {
    let problems = undocumented(&reference(), "coloc-demo", &coloc_testbed::demo::Flags::command());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_flag_left_out_of_the_reference_is_found() {
    let command = clap::Command::new("t")
        .arg(clap::Arg::new("listen").long("listen").default_value("127.0.0.1:1"))
        .arg(clap::Arg::new("ns").long("namespace").env("POD_NAMESPACE"))
        .arg(clap::Arg::new("gone").long("gone").hide(true));
    let doc = "\n## `t`\n\n| `--namespace NS` | coloc-system | the namespace |\n| `--old` | | |\n";
    let problems = undocumented(doc, "t", &command);
    assert_eq!(
        problems,
        [
            "`t` takes --listen: docs/cli.md has no row for it",
            "`t` --namespace reads $POD_NAMESPACE: its row does not say so",
            "docs/cli.md lists --old under `t`, which takes no such flag",
        ]
    );
}
