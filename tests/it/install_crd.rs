//! `samplectl install-crd` against the local cluster, with the built kubectl as witness.

use crate::support::{Namespace, kubeconfig_variant, kubectl, samplectl, samplectl_bare};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

const CRD: &str = "samples.example.com";
const LINE: &str = "customresourcedefinition.apiextensions.k8s.io/samples.example.com";
const CRD_FILE: &str = include_str!("../../manifests/crd/samples.example.com.yaml");

/// Another CRD in the same group that already uses the Sample CRD's short name.
const SQUATTER: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: squatters.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Squatter, plural: squatters, singular: squatter, shortNames: [smp]}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"#;

fn established() -> String {
    let jsonpath = r#"-o=jsonpath={.status.conditions[?(@.type=="Established")].status}"#;
    kubectl(&["get", "crd", CRD, jsonpath]).success().stdout
}

fn short_names() -> String {
    kubectl(&["get", "crd", CRD, "-o=jsonpath={.spec.names.shortNames}"]).success().stdout
}

/// One test for the whole life of the CRD: the steps depend on each other's cluster state, and the CRD is
/// cluster-wide, so they cannot run in parallel anyway.
#[test]
fn install_crd_reports_created_unchanged_and_configured() {
    let _cluster = crate::support::exclusive();
    kubectl(&["delete", "crd", CRD, "--ignore-not-found", "--wait=true"]).success();

    // Without the CRD the controller says what is missing and how to get it.
    let missing = samplectl(&["reconcile", "--once"]);
    assert_eq!(missing.code, 1, "{missing:#?}");
    assert!(
        missing.stderr.ends_with(
            "error: the Sample CRD (samples.example.com, v1alpha1) is not installed in this cluster; install it \
             with `samplectl install-crd`\n"
        ),
        "{missing:#?}"
    );

    // A CRD whose names clash with another never becomes Established: say so at once instead of waiting
    // out the timeout.
    let dir = tempfile::tempdir().unwrap();
    let squatter = dir.path().join("squatter.yaml");
    std::fs::write(&squatter, SQUATTER).unwrap();
    kubectl(&["apply", "-f", squatter.to_str().unwrap()]).success();
    crate::support::established(&["crd/squatters.example.com"]);
    let clash = samplectl(&["install-crd", "--timeout", "20s"]);
    assert_eq!(clash.code, 1, "{clash:#?}");
    assert!(
        clash.stderr.starts_with(&format!("error: {LINE} was applied but its names were not accepted: ")),
        "{clash:#?}"
    );
    assert!(clash.stderr.contains("smp"), "the message names the clashing short name: {clash:#?}");
    kubectl(&["delete", "crd", CRD, "squatters.example.com", "--wait=true"]).success();

    let dry = samplectl(&["install-crd", "--dry-run"]).success();
    assert_eq!(dry.stdout, format!("{LINE} created (server dry run)\n"));
    let absent = kubectl(&["get", "crd", CRD, "--ignore-not-found", "-o", "name"]).success();
    assert_eq!(absent.stdout, "", "a dry run must not persist the CRD");

    let first = samplectl(&["install-crd"]).success();
    assert_eq!(first.stdout, format!("{LINE} created\n"));
    assert_eq!(first.stderr, "", "nothing but data on stdout and no noise on stderr");
    assert_eq!(established(), "True", "install-crd returns only once the CRD is Established");

    let second = samplectl(&["install-crd"]).success();
    assert_eq!(second.stdout, format!("{LINE} unchanged\n"));

    // Someone edits a field samplectl owns: the next install takes it back.
    kubectl(&["patch", "crd", CRD, "--type=merge", "-p", r#"{"spec":{"names":{"shortNames":["zzz"]}}}"#]).success();
    let dry = samplectl(&["install-crd", "--dry-run"]).success();
    assert_eq!(dry.stdout, format!("{LINE} configured (server dry run)\n"));
    assert_eq!(short_names(), r#"["zzz"]"#, "a dry run must not change the CRD");
    let third = samplectl(&["install-crd"]).success();
    assert_eq!(third.stdout, format!("{LINE} configured\n"));
    assert_eq!(short_names(), r#"["smp"]"#);

    // A change to a field samplectl does not own is left alone and is not a change of samplectl's.
    kubectl(&["label", "crd", CRD, "example.com/edited-by=test"]).success();
    let fourth = samplectl(&["install-crd"]).success();
    assert_eq!(fourth.stdout, format!("{LINE} unchanged\n"));
    let label = kubectl(&["get", "crd", CRD, r"-o=jsonpath={.metadata.labels.example\.com/edited-by}"]).success();
    assert_eq!(label.stdout, "test");

    // The original example object still applies, and kubectl shows it through the printer columns.
    let ns = Namespace::new("install-crd");
    kubectl(&["apply", "-n", &ns.0, "-f", "manifests/samples/sample-resource-1.yaml"]).success();
    let table = kubectl(&["get", "samples", "-n", &ns.0]).success().stdout;
    let mut lines = table.lines();
    let header: Vec<_> = lines.next().unwrap().split("  ").filter(|c| !c.is_empty()).map(str::trim).collect();
    assert_eq!(header, ["NAME", "TEST STRING", "READY", "AGE"]);
    let row = lines.next().unwrap();
    assert!(row.starts_with("sample-resource-1"), "{table}");
    assert!(row.contains("first sample resource"), "{table}");
}

#[test]
fn print_writes_the_manifest_without_a_cluster() {
    let _cluster = crate::support::shared();
    let run = samplectl_bare(&["--kubeconfig", "/nonexistent/kubeconfig", "install-crd", "--print"]).success();
    assert_eq!(run.stdout, CRD_FILE);
    let crd: CustomResourceDefinition = serde_yaml::from_str(&run.stdout).expect("--print output is a CRD");
    assert_eq!(crd.metadata.name.as_deref(), Some(CRD));
}

#[test]
fn unreachable_server_is_a_clear_error() {
    let _cluster = crate::support::shared();
    let dir = tempfile::tempdir().unwrap();
    let path = kubeconfig_variant(dir.path(), "unreachable", |text| {
        let start = text.find("server: ").unwrap();
        let end = start + text[start..].find('\n').unwrap();
        format!("{}server: https://127.0.0.1:1{}", &text[..start], &text[end..])
    });
    let run = samplectl_bare(&["--kubeconfig", path.to_str().unwrap(), "install-crd"]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert_eq!(
        run.stderr,
        "error: the connection to the server 127.0.0.1:1 was refused - did you specify the right host or port?\n"
    );
    assert_eq!(run.stdout, "");
}

#[test]
fn bad_kubeconfigs_are_clear_errors() {
    let _cluster = crate::support::shared();
    let dir = tempfile::tempdir().unwrap();
    let invalid = dir.path().join("invalid");
    std::fs::write(&invalid, "clusters: [\n").unwrap();
    let run = samplectl_bare(&["--kubeconfig", invalid.to_str().unwrap(), "install-crd"]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(run.stderr.starts_with(&format!("error: kubeconfig {:?} is not valid: ", invalid)), "{run:#?}");

    let missing = dir.path().join("missing");
    let run = samplectl_bare(&["--kubeconfig", missing.to_str().unwrap(), "install-crd"]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(run.stderr.starts_with(&format!("error: cannot read kubeconfig {missing:?}: ")), "{run:#?}");

    let run = samplectl(&["--context", "no-such-context", "install-crd"]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert_eq!(run.stderr, "error: context \"no-such-context\" does not exist in the kubeconfig\n");

    let run = samplectl_bare(&["install-crd"]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(run.stderr.starts_with("error: no Kubernetes configuration found"), "{run:#?}");
}

#[test]
fn an_untrusted_server_certificate_is_refused() {
    let _cluster = crate::support::shared();
    let dir = tempfile::tempdir().unwrap();
    // The server's own certificate is not a CA, so nothing the server presents chains to it.
    let path = kubeconfig_variant(dir.path(), "wrong-ca", |text| text.replace("pki/ca.crt", "pki/apiserver.crt"));
    let run = samplectl_bare(&["--kubeconfig", path.to_str().unwrap(), "install-crd"]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(run.stderr.starts_with("error: unable to connect to the server 127.0.0.1:"), "{run:#?}");
}

#[test]
fn forbidden_is_reported_as_kubectl_does() {
    let _cluster = crate::support::shared();
    let dir = tempfile::tempdir().unwrap();
    // The admin identity may impersonate; "nobody" has no permissions at all.
    let path = kubeconfig_variant(dir.path(), "nobody", |text| {
        text.replace("    client-key:", "    as: nobody\n    client-key:")
    });
    let run = samplectl_bare(&["--kubeconfig", path.to_str().unwrap(), "install-crd"]);
    assert_eq!(run.code, 1, "{run:#?}");
    assert_eq!(
        run.stderr,
        "Error from server (Forbidden): customresourcedefinitions.apiextensions.k8s.io \"samples.example.com\" is \
         forbidden: User \"nobody\" cannot get resource \"customresourcedefinitions\" in API group \
         \"apiextensions.k8s.io\" at the cluster scope\n"
    );
}

#[test]
fn bad_flag_values_are_usage_errors() {
    let _cluster = crate::support::shared();
    let run = samplectl_bare(&["install-crd", "--timeout", "soon"]);
    assert_eq!(run.code, 2, "{run:#?}");
    assert!(run.stderr.contains("invalid duration \"soon\""), "{run:#?}");
    let run = samplectl_bare(&["install-crd", "--print", "--dry-run"]);
    assert_eq!(run.code, 2, "{run:#?}");
}
