//! Shell completion and the kubectl plugin, with the built kubectl as witness: a TAB after `samplectl list`
//! offers what a TAB after `kubectl get` offers (resource types, object names, namespaces, contexts), and
//! kubectl runs samplectl as `kubectl samplectl`, completion included.

use std::ffi::OsStr;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::hang::HangingProxy;
use crate::support::{
    Namespace, apply, apply_sample, cluster, exclusive, home_for_children, install_crd, kubectl, kubectl_plain,
    refusing_kubeconfig, samplectl, shared,
};

/// What a TAB after `words` offers (the last word is the one being completed), through the script
/// `samplectl completion bash` prints: its function called as bash calls it, with the words bash gives
/// it. The candidates, and what went to stderr.
fn bash_tab(words: &[&str]) -> (Vec<String>, String) {
    let script = crate::support::samplectl_bare(&["completion", "bash"]).success().stdout;
    let quote = |word: &str| format!("'{}'", word.replace('\'', r"'\''"));
    let quoted: Vec<String> = words.iter().map(|w| quote(w)).collect();
    let previous = if words.len() > 1 { quoted[quoted.len() - 2].clone() } else { quote("samplectl") };
    let program = format!(
        "{script}\nCOMP_WORDS=(samplectl {words}); COMP_CWORD={index}; COMP_TYPE=9\n\
         _clap_complete_samplectl samplectl {current} {previous}\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        words = quoted.join(" "),
        index = words.len(),
        current = quoted.last().expect("a word to complete"),
    );
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &program])
        .env_remove("KUBECONFIG")
        .env("HOME", home_for_children())
        .output()
        .expect("run bash");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "bash: {stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    (stdout.lines().filter(|l| !l.is_empty()).map(str::to_owned).collect(), stderr)
}

/// What samplectl offers for `words` against the local cluster (its kubeconfig given first, as a global
/// flag before the subcommand).
fn samplectl_tab(words: &[&str]) -> Vec<String> {
    let kubeconfig = cluster().kubeconfig.to_str().unwrap();
    let (offered, stderr) = bash_tab(&[&["--kubeconfig", kubeconfig], words].concat());
    assert_eq!(stderr, "", "a TAB prints nothing on the terminal");
    offered
}

/// kubectl's own completion (`kubectl __complete ...`, what its shell scripts call): the candidates
/// without descriptions, and cobra's directive. kubectl completes resource types from its discovery
/// cache, which other tests' CRDs may have left stale: each call gets an empty one.
fn kubectl_tab(words: &[&str], envs: &[(&str, &OsStr)]) -> (Vec<String>, String) {
    let kubeconfig = cluster().kubeconfig.as_os_str();
    let cache = tempfile::tempdir().unwrap();
    let envs = [&[("KUBECONFIG", kubeconfig), ("KUBECACHEDIR", cache.path().as_os_str())], envs].concat();
    let run = kubectl_plain(&[&["__complete"], words].concat(), &envs).success();
    let mut lines: Vec<String> = run.stdout.lines().map(|l| l.split('\t').next().unwrap().to_owned()).collect();
    let directive = lines.pop().expect("cobra ends with a directive");
    (lines, directive)
}

fn kubectl_offers(words: &[&str]) -> Vec<String> {
    let (offered, directive) = kubectl_tab(words, &[]);
    assert_eq!(directive, ":4", "kubectl offers no file names here");
    offered
}

/// Resource types, names, namespaces and contexts come from the cluster as kubectl's come. Exclusive:
/// other tests add and remove CRDs, which would change the list of types between the two tools' turns.
#[test]
fn a_tab_offers_what_a_tab_after_kubectl_get_offers() {
    let _cluster = exclusive();
    install_crd();
    let ns = Namespace::new("complete");
    let ns = ns.0.as_str();
    for name in ["alpha", "alpine", "beta"] {
        apply(ns, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}));
    }
    apply_sample(ns, "first", "one");

    let types = samplectl_tab(&["list", ""]);
    assert_eq!(types, kubectl_offers(&["get", ""]));
    for expected in ["configmaps", "deployments.apps", "samples.example.com"] {
        assert!(types.iter().any(|t| t == expected), "{expected} in {types:?}");
    }
    assert_eq!(samplectl_tab(&["list", "cm,se"]), kubectl_offers(&["get", "cm,se"]));
    assert_eq!(samplectl_tab(&["watch", "de"]), kubectl_offers(&["get", "de"]));

    let names = samplectl_tab(&["list", "-n", ns, "cm", ""]);
    assert_eq!(names, kubectl_offers(&["get", "-n", ns, "cm", ""]));
    for expected in ["alpha", "alpine", "beta"] {
        assert!(names.iter().any(|n| n == expected), "{expected} in {names:?}");
    }
    assert_eq!(samplectl_tab(&["list", "configmaps", "-n", ns, "al"]), ["alpha", "alpine"]);
    assert_eq!(
        samplectl_tab(&["list", "configmaps", "-n", ns, "al"]),
        kubectl_offers(&["get", "configmaps", "-n", ns, "al"])
    );
    // Names already on the line are not offered again.
    assert_eq!(
        samplectl_tab(&["list", "-n", ns, "cm", "alpha", ""]),
        kubectl_offers(&["get", "-n", ns, "cm", "alpha", ""])
    );
    assert_eq!(samplectl_tab(&["list", "-n", ns, "smp", ""]), ["first"]);
    assert_eq!(samplectl_tab(&["list", "-n", ns, "smp", ""]), kubectl_offers(&["get", "-n", ns, "smp", ""]));
    assert_eq!(samplectl_tab(&["list", "--gvr", "v1/configmaps", "-n", ns, "b"]), ["beta"]);

    assert_eq!(samplectl_tab(&["list", "-n", ns]), [ns]);
    assert_eq!(samplectl_tab(&["list", "-n", ns]), kubectl_offers(&["get", "-n", ns]));
    assert_eq!(samplectl_tab(&["list", "cm", "--context", ""]), kubectl_offers(&["get", "cm", "--context", ""]));
    assert_eq!(samplectl_tab(&["watch", "--gvr", "example.com/"]), ["example.com/v1alpha1/samples"]);
    assert_eq!(samplectl_tab(&["reconcile", "--child", "v1/config"]), ["v1/configmaps"]);

    // watch follows one type and one name, and names never go with -A: only flags can follow, and on an
    // empty word flags are what is offered when nothing else can come.
    let after_the_name = samplectl_tab(&["watch", "-n", ns, "cm", "alpha", ""]);
    assert!(after_the_name.contains(&"--max-events".to_owned()), "{after_the_name:?}");
    assert!(after_the_name.iter().all(|word| word.starts_with("--")), "{after_the_name:?}");
    assert_eq!(samplectl_tab(&["watch", "cm,se"]), Vec::<String>::new());
    assert_eq!(samplectl_tab(&["list", "-A", "cm", "a"]), Vec::<String>::new());
    // Flags are offered once a `-` is typed; values before flags otherwise.
    assert_eq!(samplectl_tab(&["list", "--sel"]), ["--selector"]);
    assert_eq!(samplectl_tab(&[""]), ["install-crd", "list", "watch", "reconcile", "completion", "help"]);
}

/// `kubectl samplectl ...` finds samplectl on PATH as `kubectl-samplectl` and runs it: the same output,
/// its usage errors naming the command as typed, and completion through kubectl's own, which calls
/// `kubectl_complete-samplectl`.
#[test]
fn kubectl_runs_samplectl_as_its_plugin_and_completes_it() {
    let _cluster = shared();
    let ns = Namespace::new("plugin");
    let ns = ns.0.as_str();
    for name in ["red", "green"] {
        apply(ns, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": name}}));
    }
    let dir = tempfile::tempdir().unwrap();
    for name in ["kubectl-samplectl", "kubectl_complete-samplectl"] {
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_samplectl"), dir.path().join(name)).unwrap();
    }
    // Only the plugin's directory: what else is on PATH (other plugins, shadowed names) is not this test's.
    let path = dir.path().as_os_str();
    let kubeconfig = cluster().kubeconfig.to_str().unwrap();

    let plugins = kubectl_plain(&["plugin", "list"], &[("PATH", path)]).success();
    assert!(plugins.stdout.contains(&format!("{}", dir.path().join("kubectl-samplectl").display())), "{plugins:?}");

    for format in ["name", "json", "jsonpath={.items[*].data.k}"] {
        let through_kubectl = kubectl_plain(
            &["samplectl", "list", "cm", "-n", ns, "--kubeconfig", kubeconfig, "-o", format],
            &[("PATH", path)],
        )
        .success();
        let direct = samplectl(&["list", "cm", "-n", ns, "-o", format]).success();
        assert_eq!(through_kubectl.stdout, direct.stdout, "-o {format}");
        assert_eq!(through_kubectl.stdout, kubectl(&["get", "cm", "-n", ns, "-o", format]).success().stdout);
    }

    let mistake = kubectl_plain(&["samplectl", "list", "--bogus"], &[("PATH", path)]);
    assert_eq!(mistake.code, 2, "{mistake:?}");
    assert!(mistake.stderr.contains("Usage: kubectl samplectl list [OPTIONS]"), "{mistake:?}");
    let help = kubectl_plain(&["samplectl", "--help"], &[("PATH", path)]).success();
    assert!(help.stdout.contains("Usage: kubectl samplectl [OPTIONS] <COMMAND>"), "{help:?}");

    let plugin_tab = |words: &[&str]| kubectl_tab(&[&["samplectl"], words].concat(), &[("PATH", path)]);
    assert_eq!(plugin_tab(&["list", "-n", ns, "cm", ""]), (vec!["green".to_owned(), "red".to_owned()], ":4".into()));
    assert_eq!(plugin_tab(&["list", "-n", ns, "cm", ""]).0, kubectl_offers(&["get", "-n", ns, "cm", ""]));
    assert_eq!(plugin_tab(&["list", "config"]).0, kubectl_offers(&["get", "config"]));
    assert_eq!(plugin_tab(&["wa"]), (vec!["watch".to_owned()], ":4".into()));
    // A format that wants its value right after the `=`: no space, as kubectl's directive 2 says.
    let (formats, directive) = plugin_tab(&["list", "-o", "custom-col"]);
    assert_eq!((formats.len(), directive.as_str()), (2, ":6"), "{formats:?}");
}

/// With no cluster to ask (no kubeconfig, a server that refuses, or one that never answers), a TAB offers
/// nothing from the cluster, prints nothing on the terminal, and comes back.
#[test]
fn a_tab_with_no_cluster_to_ask_offers_nothing_and_comes_back() {
    let _cluster = shared();
    let dir = tempfile::tempdir().unwrap();
    let refused = refusing_kubeconfig(dir.path());
    let missing = dir.path().join("missing.kubeconfig");
    let proxy = HangingProxy::start();
    proxy.hang_requests_containing("/api");
    let hanging = proxy.kubeconfig(dir.path());
    let every_kind: &[&[&str]] = &[&["list", "c"], &["list", "cm", "x"], &["watch", "-n", ""], &["list", "--gvr", "v"]];
    for (kubeconfig, words) in [(&refused, every_kind), (&missing, every_kind), (&hanging, &every_kind[..1])] {
        let kubeconfig = kubeconfig.to_str().unwrap();
        for words in words {
            let started = Instant::now();
            let (offered, stderr) = bash_tab(&[&["--kubeconfig", kubeconfig], *words].concat());
            assert_eq!((offered, stderr.as_str()), (Vec::new(), ""), "{kubeconfig} {words:?}");
            // The wait for an answer is cut at 5 s; a hung TAB would hang the shell.
            assert!(started.elapsed() < Duration::from_secs(20), "{kubeconfig} {words:?}: {:?}", started.elapsed());
        }
    }
    // What needs no cluster is still offered.
    let (offered, _) = bash_tab(&["--kubeconfig", refused.to_str().unwrap(), "list", "-o", "ya"]);
    assert_eq!(offered, ["yaml"]);
}

/// `samplectl completion SHELL` prints what `COMPLETE=SHELL samplectl` prints (clap_complete's script,
/// which calls this binary back by its path), for every shell; an unknown shell is a usage error.
#[test]
fn every_shell_gets_the_script_that_calls_samplectl_back() {
    let binary = env!("CARGO_BIN_EXE_samplectl");
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let printed = crate::support::samplectl_bare(&["completion", shell]).success().stdout;
        let from_env = Command::new(binary).env("COMPLETE", shell).output().unwrap();
        assert!(from_env.status.success());
        assert_eq!(printed, String::from_utf8(from_env.stdout).unwrap(), "{shell}");
        assert!(printed.contains(binary), "{shell}: the script calls {binary} back:\n{printed}");
    }
    let unknown = crate::support::samplectl_bare(&["completion", "tcsh"]);
    assert_eq!(unknown.code, 2);
    assert!(unknown.stderr.starts_with("error: invalid value 'tcsh' for '<SHELL>'"), "{unknown:?}");
}
