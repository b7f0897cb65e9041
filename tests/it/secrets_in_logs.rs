//! Credentials never reach the output, at any verbosity: a bearer token and a client key, checked in
//! everything samplectl prints with `-vvv` (trace) while it lists, watches and reconciles.

use crate::support::{Namespace, kubectl, samplectl_bare};

fn runs(kubeconfig: &str, ns: &str) -> String {
    let mut all = String::new();
    for args in [
        vec!["list", "cm", "-n", ns],
        vec!["list", "nosuchthings"],
        vec!["watch", "cm", "-n", ns, "--timeout", "1s"],
        vec!["reconcile", "-n", ns, "--once"],
    ] {
        let mut full = vec!["--kubeconfig", kubeconfig, "-vvv"];
        full.extend(args);
        let run = samplectl_bare(&full);
        all.push_str(&run.stdout);
        all.push_str(&run.stderr);
    }
    assert!(all.len() > 1000, "trace logging produced output to search:\n{all}");
    all
}

#[test]
fn tokens_and_client_keys_never_appear_in_output() {
    let _cluster = crate::support::shared();
    crate::support::cluster();
    let ns = Namespace::new("secrets");
    kubectl(&["create", "configmap", "x", "-n", &ns.0]).success();
    let dir = tempfile::tempdir().unwrap();

    // A client certificate and key: no line of the key may show up.
    let admin = crate::support::cluster().kubeconfig.clone();
    let key_path = std::fs::read_to_string(&admin)
        .unwrap()
        .lines()
        .find_map(|l| l.trim().strip_prefix("client-key: ").map(str::to_owned))
        .unwrap();
    let key = std::fs::read_to_string(key_path).unwrap();
    let output = runs(admin.to_str().unwrap(), &ns.0);
    for line in key.lines().filter(|l| !l.starts_with("-----")) {
        assert!(!output.contains(line), "a line of the client key was printed");
    }

    // A bearer token (a valid one, for a ServiceAccount with no permissions, so the runs also fail).
    kubectl(&["create", "serviceaccount", "nobody", "-n", &ns.0]).success();
    let token = kubectl(&["create", "token", "nobody", "-n", &ns.0]).success().stdout.trim().to_owned();
    let config = crate::support::token_kubeconfig(dir.path(), "token", &token);
    let output = runs(config.to_str().unwrap(), &ns.0);
    assert!(output.contains("Forbidden"), "the token was used:\n{output}");
    // Any 16-character piece of the token would be a leak.
    for start in (0..token.len().saturating_sub(16)).step_by(8) {
        assert!(!output.contains(&token[start..start + 16]), "part of the token was printed");
    }
}
