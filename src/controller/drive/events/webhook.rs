//! shell-operator's admission and conversion webhooks, served over TLS. Each server some binding needs
//! starts with the process (`serve`), on a standby too, so that a Service in front of several replicas
//! always reaches one that answers. The replica that runs the hooks then registers them, before its
//! first onStartup run as shell-operator does (`register`): the Validating/MutatingWebhookConfigurations
//! are created (or their webhooks replaced), and each CRD a conversion binding names is pointed at the
//! conversion server. A review is answered by running its hook at once, outside the queues (its rate
//! limit still applies); a conversion runs one hook per step of the chain of declared conversions that
//! leads to the version asked for. Every write is checked against the process's fence, as a patch
//! file's are: on a standby, a webhook's patch file fails its run.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, watch};

use super::{Shared, queue};
use crate::cluster::scope;
use crate::controller::engine::request::{Failed, Fenced, bounded};
use crate::controller::rules::FIELD_MANAGER;
use crate::controller::rules::shell::context::{Pending, What};
use crate::controller::rules::shell::webhook::{self, AdmissionAnswer, Answer};
use crate::controller::serve::http;
use crate::controller::serve::inflight::{self, Budget};
use crate::controller::serve::tls::from_files;
use crate::controller::settings::{WebhookEndpoint, WebhookSettings};

/// The path segment before an admission webhook's id: shell-operator's default configuration id.
const CONFIGURATION_ID: &str = "hooks";
/// Registration is tried this many times, waiting 2 s, then twice as long each time up to 15 s.
const REGISTER_TRIES: u32 = 5;
/// A CRD a conversion binding names is looked for every 15 s for up to 15 minutes, as shell-operator does.
const CRD_WAIT: Duration = Duration::from_secs(15);
const CRD_TRIES: u32 = 60;

/// The largest AdmissionReview: an update carries the object and its old self, each at most the 3 MiB
/// the API server accepts in a request, and 2 MiB for the rest (user info, options).
const MAX_ADMISSION_REVIEW: usize = 8 << 20;

/// The largest ConversionReview: the API server sends every object of a list that needs converting in
/// one review; 64 MiB is a page of 500 objects of 128 KiB (kubectl asks for pages of 500). A larger
/// list is refused with 413, and its reader sees the conversion fail.
const MAX_CONVERSION_REVIEW: usize = 64 << 20;

/// The bytes of the reviews each server reads and answers at once (`serve::inflight`): four of the
/// largest admission reviews, one of the largest conversions.
const ADMISSION_BUDGET: usize = 4 * MAX_ADMISSION_REVIEW;
const CONVERSION_BUDGET: usize = MAX_CONVERSION_REVIEW;

/// How many runs of one hook its webhooks start at once (`--webhook-runs-in-flight`, 8 by default):
/// each is a process, in a container of 256 MiB.
fn runs_in_flight() -> usize {
    crate::limits::get().webhook_runs_in_flight
}

/// What the servers' handlers share.
struct App {
    shared: Arc<Shared>,
    admission_budget: Budget,
    conversion_budget: Budget,
    /// Per hook, its runs in flight.
    runs: Vec<Arc<Semaphore>>,
    /// Admission bindings by webhook id: (hook, index in its `admission`).
    admission: HashMap<String, (usize, usize)>,
    /// Conversion rules by CRD name, in hook then declaration order.
    conversion: HashMap<String, Vec<Rule>>,
}

struct Rule {
    from: String,
    to: String,
    hook: usize,
    binding: usize,
}

/// Starts the servers the hooks need, until `stop`. Nothing is registered yet: see [`register`].
pub(super) async fn serve(shared: &Arc<Shared>, settings: &WebhookSettings, stop: watch::Receiver<bool>) -> Result<()> {
    let mut admission = HashMap::new();
    let mut conversion: HashMap<String, Vec<Rule>> = HashMap::new();
    for (hook, h) in shared.hooks.iter().enumerate() {
        for (binding, a) in h.loaded.config.admission.iter().enumerate() {
            admission.insert(a.id.clone(), (hook, binding));
        }
        for (binding, c) in h.loaded.config.conversion.iter().enumerate() {
            let rules = conversion.entry(c.crd_name.clone()).or_default();
            for (from, to) in &c.rules {
                rules.push(Rule { from: from.clone(), to: to.clone(), hook, binding });
            }
        }
    }
    let (has_admission, has_conversion) = (!admission.is_empty(), !conversion.is_empty());
    let app = Arc::new(App {
        shared: shared.clone(),
        admission_budget: Budget::new(ADMISSION_BUDGET, MAX_ADMISSION_REVIEW),
        conversion_budget: Budget::new(CONVERSION_BUDGET, MAX_CONVERSION_REVIEW),
        runs: shared.hooks.iter().map(|_| Arc::new(Semaphore::new(runs_in_flight()))).collect(),
        admission,
        conversion,
    });
    if has_admission {
        read_ca(&settings.admission)?;
        let router = axum::Router::new().route("/healthz", get(|| async { StatusCode::OK }));
        let router = router.route("/{*path}", post(review_admission)).with_state(app.clone());
        listen(&settings.admission, router, stop.clone(), "admission").await?;
    }
    if has_conversion {
        read_ca(&settings.conversion)?;
        let router = axum::Router::new().route("/healthz", get(|| async { StatusCode::OK }));
        let router = router.route("/{*path}", post(review_conversion)).with_state(app);
        listen(&settings.conversion, router, stop, "conversion").await?;
    }
    Ok(())
}

/// Registers the hooks' webhooks: the Validating/MutatingWebhookConfigurations, and each CRD a
/// conversion binding names pointed at the conversion server.
pub(super) async fn register(shared: &Shared, settings: &WebhookSettings) -> Result<()> {
    let configs = || shared.hooks.iter().map(|h| &h.loaded.config);
    if configs().any(|c| !c.admission.is_empty()) {
        let ca = read_ca(&settings.admission)?;
        for mutating in [false, true] {
            register_admission(shared, settings, mutating, &ca).await?;
        }
    }
    let crds: std::collections::BTreeSet<&str> =
        configs().flat_map(|c| c.conversion.iter().map(|b| b.crd_name.as_str())).collect();
    if !crds.is_empty() {
        let ca = read_ca(&settings.conversion)?;
        for crd in crds {
            point_crd_here(shared, &settings.conversion, &settings.namespace, crd, &ca).await?;
        }
    }
    Ok(())
}

fn read_ca(endpoint: &WebhookEndpoint) -> Result<Vec<u8>> {
    std::fs::read(&endpoint.ca).with_context(|| format!("read CA bundle: {}", endpoint.ca.display()))
}

async fn listen(
    endpoint: &WebhookEndpoint,
    router: axum::Router,
    mut stop: watch::Receiver<bool>,
    what: &'static str,
) -> Result<()> {
    let tls = from_files(&endpoint.cert, &endpoint.key, &endpoint.client_cas)
        .with_context(|| format!("the {what} webhook server's TLS"))?;
    let (host, port) = &endpoint.listen;
    let tcp = tokio::net::TcpListener::bind((host.as_str(), *port))
        .await
        .with_context(|| format!("try listen on '{host}:{port}'"))?;
    tracing::info!(
        "{what} webhook server listens on {}",
        tcp.local_addr().map_or_else(|_| format!("{host}:{port}"), |a| a.to_string())
    );
    let shutdown = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    tokio::spawn(http::serve(tcp, Some(tls), router, shutdown));
    Ok(())
}

/// Where the API server calls `path`: the base URL given, or the Service.
fn client_config(endpoint: &WebhookEndpoint, namespace: &str, path: &str, ca: &[u8]) -> Value {
    let bundle = base64::engine::general_purpose::STANDARD.encode(ca);
    match &endpoint.url {
        Some(base) => json!({ "url": format!("{}{path}", base.trim_end_matches('/')), "caBundle": bundle }),
        None => json!({
            "service": { "namespace": namespace, "name": endpoint.service, "path": path },
            "caBundle": bundle,
        }),
    }
}

/// Creates the hooks' Validating (or Mutating) WebhookConfiguration, or replaces the webhooks of the one
/// there, guarded by the resourceVersion read. Nothing is done when no hook has such a binding.
async fn register_admission(shared: &Shared, settings: &WebhookSettings, mutating: bool, ca: &[u8]) -> Result<()> {
    let entries: Vec<Value> = shared
        .hooks
        .iter()
        .flat_map(|h| h.loaded.config.admission.iter())
        .filter(|a| a.mutating == mutating)
        .map(|a| {
            let mut entry = a.entry.clone();
            let path = format!("/{CONFIGURATION_ID}/{}", a.id);
            entry["clientConfig"] = client_config(&settings.admission, &settings.namespace, &path, ca);
            entry["matchPolicy"] = json!("Equivalent");
            entry["admissionReviewVersions"] = json!(["v1", "v1beta1"]);
            entry
        })
        .collect();
    if entries.is_empty() {
        return Ok(());
    }
    let (ar, kind) = match mutating {
        true => (ApiResource::erase::<MutatingWebhookConfiguration>(&()), "MutatingWebhookConfiguration"),
        false => (ApiResource::erase::<ValidatingWebhookConfiguration>(&()), "ValidatingWebhookConfiguration"),
    };
    let name = format!("{}-{CONFIGURATION_ID}", settings.configuration_name);
    let api = Fenced::new(scope::dynamic(shared.client.clone(), &ar, None), &shared.fence);
    let mut wait = Duration::from_secs(2);
    for attempt in 1..=REGISTER_TRIES {
        let result = submit(&api, &ar, &name, &entries).await;
        match result {
            Ok(()) => {
                tracing::info!("{kind} {name} registered with {} webhooks", entries.len());
                return Ok(());
            }
            // The API server's refusal of the configuration itself will not pass by waiting.
            Err((err, lasting)) if lasting || attempt == REGISTER_TRIES => {
                return Err(anyhow!("register {kind} {name}: {err}"));
            }
            Err((err, _)) => {
                tracing::warn!("{kind} {name}: {err}; tried again in {}", crate::duration::format(wait));
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(15));
            }
        }
    }
    Ok(())
}

/// One try: the error, and whether it lasts (the API server refused what was sent).
async fn submit(
    api: &Fenced<'_, DynamicObject>,
    ar: &ApiResource,
    name: &str,
    entries: &[Value],
) -> Result<(), (String, bool)> {
    // Fenced lasts too: the next leader registers the configuration.
    let describe = |failed: Failed| {
        let lasting =
            matches!(failed, Failed::Fenced) || matches!(failed.status(), Some(400..=408 | 410..=428 | 430..=499));
        (failed.message(), lasting)
    };
    let found = bounded(api.reads().get_opt(name)).await.map_err(|f| (f.message(), false))?;
    let post = PostParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..Default::default() };
    match found {
        None => {
            let mut object = DynamicObject::new(name, ar);
            object.data = json!({ "webhooks": entries });
            api.create(&post, &object).await.map(drop).map_err(describe)
        }
        Some(mut object) => {
            // The read resourceVersion stays on the object: a change made meanwhile is a conflict, tried again.
            object.data["webhooks"] = json!(entries);
            api.replace(name, &post, &object).await.map(drop).map_err(describe)
        }
    }
}

/// Points `crd`'s conversion at the conversion server: strategy Webhook, this server's client
/// configuration, review versions v1 and v1beta1. The CRD is waited for (every 15 s, up to 15 minutes);
/// the patch carries the resourceVersion read.
async fn point_crd_here(
    shared: &Shared,
    endpoint: &WebhookEndpoint,
    namespace: &str,
    crd: &str,
    ca: &[u8],
) -> Result<()> {
    let crds = scope::dynamic(shared.client.clone(), &ApiResource::erase::<CustomResourceDefinition>(&()), None);
    let api = Fenced::new(crds, &shared.fence);
    let mut config = client_config(endpoint, namespace, &format!("/{crd}"), ca);
    // A merge patch keeps what it does not name: the other way of reaching the server is cleared.
    match endpoint.url {
        Some(_) => config["service"] = Value::Null,
        None => config["url"] = Value::Null,
    }
    let mut tries = 0;
    loop {
        tries += 1;
        let found = match bounded(api.reads().get_opt(crd)).await {
            Ok(Some(found)) => found,
            Ok(None) if tries < CRD_TRIES => {
                tracing::warn!("CRD {crd} of a conversion binding is not there; looked for again in 15s");
                tokio::time::sleep(CRD_WAIT).await;
                continue;
            }
            Ok(None) => return Err(anyhow!("update CRD {crd}: not found after 15 minutes")),
            Err(err) if tries < CRD_TRIES => {
                tracing::warn!("cannot read CRD {crd}: {}; tried again in 15s", err.message());
                tokio::time::sleep(CRD_WAIT).await;
                continue;
            }
            Err(err) => return Err(anyhow!("get CRD {crd}: {}", err.message())),
        };
        let patch = json!({
            "metadata": { "resourceVersion": found.metadata.resource_version },
            "spec": { "conversion": {
                "strategy": "Webhook",
                "webhook": { "clientConfig": config, "conversionReviewVersions": ["v1", "v1beta1"] },
            }},
        });
        let params = PatchParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..Default::default() };
        match api.patch(crd, &params, &Patch::Merge(&patch)).await {
            Ok(_) => {
                tracing::info!("CRD {crd} converts through the conversion webhook server");
                return Ok(());
            }
            Err(failed) if failed.status() == Some(409) && tries < REGISTER_TRIES => continue,
            Err(failed) => return Err(anyhow!("update CRD {crd}: {}", failed.message())),
        }
    }
}

/// As chi's `AllowContentType("application/json")`: the media type, whatever its parameters.
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

/// The review in a request's body, or the answer that refuses it.
fn read_review(headers: &HeaderMap, body: &[u8]) -> Result<(Value, Value), (StatusCode, &'static str)> {
    if !is_json(headers) {
        return Err((StatusCode::UNSUPPORTED_MEDIA_TYPE, ""));
    }
    let review: Value = match serde_json::from_slice(body) {
        Ok(review @ Value::Object(_)) => review,
        _ => return Err((StatusCode::BAD_REQUEST, "Invalid JSON payload")),
    };
    match review.get("request") {
        Some(request @ Value::Object(_)) => Ok((review.clone(), request.clone())),
        _ => Err((StatusCode::BAD_REQUEST, "Missing parameters: request")),
    }
}

fn answer(review: &Value, response: Value) -> Response {
    let body = json!({ "apiVersion": review["apiVersion"], "kind": review["kind"], "response": response });
    ([(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

/// One run of a webhook's hook, outside the queues. A standby runs it too, unless its binding reads
/// snapshots, which only the replica running the hooks has.
async fn run(
    app: &App,
    hook: usize,
    event: &'static str,
    context: Pending,
    wait: Duration,
) -> Result<Answer, NoAnswer> {
    let shared = &app.shared;
    if !context.snapshots.is_empty() && !shared.running.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(NoAnswer::NoSnapshots(format!(
            "binding {:?} reads snapshots, and this replica does not run the hooks (it stands by for the Lease)",
            context.binding
        )));
    }
    let name = &shared.hooks[hook].loaded.name;
    let Ok(Ok(_run)) = tokio::time::timeout(wait, app.runs[hook].clone().acquire_owned()).await else {
        let why = format!("hook {name} has {} reviews in flight already; try again", runs_in_flight());
        tracing::warn!(hook = name.as_str(), binding = context.binding.as_str(), "{why}");
        return Err(NoAnswer::Busy(why));
    };
    if let Some(limiter) = &shared.hooks[hook].limiter {
        limiter.wait().await;
    }
    let started = Instant::now();
    let result = queue::run(shared, "", hook, event, std::slice::from_ref(&context), &[]).await;
    shared.metrics.reconciled(name, if result.is_ok() { "success" } else { "error" }, started.elapsed());
    if let Err(err) = &result {
        tracing::error!(hook = name.as_str(), binding = context.binding.as_str(), "{name} FAILED: {err}");
    }
    result.map_err(|_| NoAnswer::Failed)
}

/// Why a webhook's run gave no answer.
enum NoAnswer {
    /// The run failed (its hook, or what it wrote); the reason is logged.
    Failed,
    /// It was not run: this replica has no snapshots to give it.
    NoSnapshots(String),
    /// It was not run: the hook has as many runs in flight as it may, until the API server's deadline.
    Busy(String),
}

async fn review_admission(State(app): State<Arc<App>>, uri: Uri, headers: HeaderMap, body: Body) -> Response {
    let (body, _share) = match app.admission_budget.read(&uri, &headers, body).await {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    let (review, request) = match read_review(&headers, &body) {
        Ok(read) => read,
        Err(refused) => return refused.into_response(),
    };
    let uid = request.get("uid").cloned().unwrap_or(Value::Null);
    // `/<configuration id>/<webhook id>`, the id possibly with slashes of its own.
    let mut segments = uri.path().split('/').filter(|s| !s.is_empty());
    let configuration = segments.next().unwrap_or_default().to_owned();
    let id = segments.collect::<Vec<_>>().join("/");
    let found = app.admission.get(&id).filter(|_| configuration == CONFIGURATION_ID);
    let Some(&(hook, index)) = found else {
        let message = format!("handle AdmissionReview: no hook found for '{configuration}' '{id}'");
        tracing::error!("{message}");
        return answer(&review, webhook::admission_error(&uid, &message));
    };
    let binding = &app.shared.hooks[hook].loaded.config.admission[index];
    let text = |pointer: &str| request.pointer(pointer).and_then(Value::as_str).unwrap_or_default().to_owned();
    let (kind, namespace, name) = (text("/kind/kind"), text("/namespace"), text("/name"));
    tracing::info!(
        hook = app.shared.hooks[hook].loaded.name.as_str(),
        binding = binding.name.as_str(),
        "Got AdmissionReview request: {kind} {namespace}/{name}"
    );
    let context = Pending {
        binding: binding.name.clone(),
        what: What::Admission { mutating: binding.mutating, request },
        group: binding.group.clone(),
        snapshots: binding.include_snapshots.clone(),
        v0: false,
    };
    let event = if binding.mutating { "KubernetesMutating" } else { "KubernetesValidating" };
    let response = match run(&app, hook, event, context, inflight::wait_for(&uri)).await {
        Ok(Answer::Admission(Some(answer))) => webhook::admission_response(&uid, &answer),
        Ok(_) => webhook::admission_error(&uid, "handle AdmissionReview: hook task prop error"),
        Err(NoAnswer::NoSnapshots(why)) => webhook::admission_error(&uid, &why),
        Err(NoAnswer::Busy(why)) => webhook::admission_refusal(&uid, 429, &why),
        Err(NoAnswer::Failed) => webhook::admission_response(
            &uid,
            &AdmissionAnswer { allowed: false, message: "Hook failed".into(), warnings: Vec::new(), patch: Vec::new() },
        ),
    };
    answer(&review, response)
}

async fn review_conversion(State(app): State<Arc<App>>, uri: Uri, headers: HeaderMap, body: Body) -> Response {
    let (body, _share) = match app.conversion_budget.read(&uri, &headers, body).await {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    let (review, request) = match read_review(&headers, &body) {
        Ok(read) => read,
        Err(refused) => return refused.into_response(),
    };
    let uid = request.get("uid").cloned().unwrap_or(Value::Null);
    let crd = uri.path().trim_start_matches('/');
    let result = convert(&app, crd, request, inflight::wait_for(&uri)).await;
    if let Err(err) = &result {
        tracing::error!(crd, "conversion failed: {err}");
    }
    answer(&review, webhook::conversion_response(&uid, result))
}

/// Converts the request's objects to its `desiredAPIVersion`: for each version they are in, the chain
/// of declared conversions to it, one hook run per step, each step given the objects as the previous
/// left them.
async fn convert(app: &App, crd: &str, request: Value, wait: Duration) -> Result<Vec<Value>, String> {
    let desired = request.get("desiredAPIVersion").and_then(Value::as_str).unwrap_or_default().to_owned();
    let mut objects = request.get("objects").and_then(Value::as_array).cloned().unwrap_or_default();
    let count = objects.len();
    let rules = app.conversion.get(crd).map(Vec::as_slice).unwrap_or_default();
    let declared: Vec<(String, String)> = rules.iter().map(|r| (r.from.clone(), r.to.clone())).collect();
    let all_there = |objects: &[Value]| webhook::api_versions(objects) == [desired.clone()];
    let mut done = all_there(&objects);
    tracing::info!(crd, objects = count, "Handle kubernetesCustomResourceConversion event for crd {crd} to {desired}");
    for source in webhook::api_versions(&objects) {
        if done {
            break;
        }
        let Some(steps) = webhook::chain(&declared, &source, &desired) else { continue };
        for step in steps {
            let rule = &rules[step];
            let binding = &app.shared.hooks[rule.hook].loaded.config.conversion[rule.binding];
            let mut step_request = request.clone();
            step_request["objects"] = Value::Array(objects.clone());
            let context = Pending {
                binding: binding.name.clone(),
                what: What::Conversion { from: rule.from.clone(), to: rule.to.clone(), request: step_request },
                group: binding.group.clone(),
                snapshots: binding.include_snapshots.clone(),
                v0: false,
            };
            let answer = run(app, rule.hook, "KubernetesConversion", context, wait).await.map_err(|err| match err {
                NoAnswer::NoSnapshots(why) | NoAnswer::Busy(why) => why,
                NoAnswer::Failed => format!("Hook failed to convert to {desired}"),
            })?;
            match answer {
                // shell-operator's docs promise the hook's message to the API server; its code drops it.
                Answer::Conversion(Some(said)) if !said.failed_message.is_empty() => {
                    return Err(said.failed_message);
                }
                Answer::Conversion(Some(said)) => objects = said.converted,
                _ => return Err("handle ConversionReview: hook task prop error".into()),
            }
            if all_there(&objects) {
                done = true;
                break;
            }
        }
    }
    if !done {
        return Err(format!("Conversion {crd} to {desired} was not successful"));
    }
    if objects.len() != count {
        return Err(format!("hook returned {} objects instead of {count}", objects.len()));
    }
    Ok(objects)
}
