//! Reading collections from the API server, schema-less: pages of a list (through the one page loop every
//! reader uses), one named object, and the lines of a watch, either as the server's Table rendering (what
//! kubectl prints) or as whole objects (for json, yaml and name output). Both shapes come back as `Item`s
//! so the printers and the watch logic need not care which one was asked for.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use futures::{AsyncBufReadExt, Stream, TryStreamExt, stream};
use http::HeaderValue;
use http::header::ACCEPT;
use kube::Client;
use kube::api::ObjectList;
use kube::api::{DynamicObject, GetParams, ListParams, WatchParams};
use kube::core::{Request, Resource};
use serde::Deserialize;
use serde_json::Value;

use super::resolve::Resolved;

/// kubectl's Accept header for human output; the plain JSON at the end is for servers or resources that
/// cannot render a Table.
const TABLE_ACCEPT: &str =
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadAs {
    Table,
    /// A Table whose rows carry their whole objects (`includeObject=Object`), for `--sort-by`.
    TableWithObjects,
    Objects,
}

/// Where a command reads from: a resource, and a namespace unless it reads across all of them (or the
/// resource is cluster-scoped).
#[derive(Debug, Clone)]
pub struct Target {
    pub resolved: Resolved,
    pub namespace: Option<String>,
}

impl Target {
    fn path(&self) -> String {
        DynamicObject::url_path(&self.resolved.ar, self.namespace.as_deref())
    }

    /// `No resources found in NS namespace.` or, across namespaces or for cluster-scoped resources,
    /// `No resources found`: kubectl's words.
    pub fn nothing_found(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("No resources found in {ns} namespace."),
            None => "No resources found".to_owned(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Column {
    pub name: String,
    #[serde(default)]
    pub priority: i32,
}

/// One object as a row of the server's Table, or as the whole object.
#[derive(Debug, Clone)]
pub struct Item {
    pub uid: String,
    pub resource_version: String,
    pub namespace: Option<String>,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub creation_timestamp: Option<String>,
    /// Table cells, when the server rendered a Table.
    pub cells: Option<Vec<Value>>,
    /// The whole object (with apiVersion and kind filled in), when asked for objects.
    pub object: Option<Value>,
}

#[derive(Debug, Default)]
pub struct Page {
    pub resource_version: String,
    pub continue_token: Option<String>,
    /// The Table's columns; `None` when the server answered with plain objects.
    pub columns: Option<Vec<Column>>,
    pub items: Vec<Item>,
}

fn with_accept(mut req: http::Request<Vec<u8>>, shape: ReadAs) -> http::Request<Vec<u8>> {
    if shape != ReadAs::Objects {
        req.headers_mut().insert(ACCEPT, HeaderValue::from_static(TABLE_ACCEPT));
    }
    if shape == ReadAs::TableWithObjects {
        let uri = req.uri().to_string();
        let joined = if uri.contains('?') {
            format!("{uri}&includeObject=Object")
        } else {
            format!("{uri}?includeObject=Object")
        };
        *req.uri_mut() = joined.parse().expect("a request URI with one more parameter is a URI");
    }
    req
}

/// One page of a list answer: what says whether another page follows.
pub trait Paged {
    fn continue_token(&self) -> Option<String>;
}

impl Paged for Page {
    fn continue_token(&self) -> Option<String> {
        self.continue_token.clone()
    }
}

impl<K: Clone> Paged for ObjectList<K> {
    fn continue_token(&self) -> Option<String> {
        self.metadata.continue_.clone().filter(|token| !token.is_empty())
    }
}

/// The page loop, the only one in samplectl: `fetch` is asked for the first page with `lp`, then for each
/// next one with the continue token the previous page gave, until a page gives none. Pages arrive as
/// they are read, so a long list can be printed before its end is fetched.
pub fn pages<P, E, F, Fut>(lp: ListParams, fetch: F) -> impl Stream<Item = Result<P, E>>
where
    P: Paged,
    F: FnMut(ListParams) -> Fut,
    Fut: Future<Output = Result<P, E>>,
{
    stream::try_unfold((Some(lp), fetch), |(lp, mut fetch)| async move {
        let Some(lp) = lp else { return Ok(None) };
        let page = fetch(lp.clone()).await?;
        let next = page.continue_token().map(|token| ListParams { continue_token: Some(token), ..lp });
        Ok(Some((page, (next, fetch))))
    })
}

#[allow(clippy::disallowed_methods)] // GET requests only: a list page, one object, a watch
pub async fn list_page(client: &Client, target: &Target, lp: &ListParams, shape: ReadAs) -> Result<Page> {
    let req = Request::new(target.path()).list(lp).context("cannot build the list request")?;
    let body: Value = client.request(with_accept(req, shape)).await?;
    Ok(parse_page(body, &target.resolved))
}

/// The pages of a list in the given shape, as they are read.
pub fn list_pages<'a>(
    client: &'a Client,
    target: &'a Target,
    lp: &ListParams,
    shape: ReadAs,
) -> impl Stream<Item = Result<Page>> + 'a {
    pages(lp.clone(), move |lp| async move { list_page(client, target, &lp, shape).await })
}

/// Every page of a list, for callers that need the whole of it (a watch's starting state): the list's
/// resourceVersion (the last page's), the Table's columns if any, and all items.
pub async fn list_all(client: &Client, target: &Target, lp: &ListParams, shape: ReadAs) -> Result<Page> {
    list_pages(client, target, lp, shape)
        .try_fold(Page::default(), |mut all, page| async move {
            all.columns = all.columns.or(page.columns);
            all.items.extend(page.items);
            all.resource_version = page.resource_version;
            Ok(all)
        })
        .await
}

/// One object by name, or with `subresource` (`status`, `scale`) that subresource of it.
#[allow(clippy::disallowed_methods)] // GET requests only: a list page, one object, a watch
pub async fn get_one(
    client: &Client,
    target: &Target,
    name: &str,
    subresource: Option<&str>,
    shape: ReadAs,
) -> Result<Page> {
    let request = Request::new(target.path());
    let req = match subresource {
        Some(subresource) => request.get_subresource(subresource, name),
        None => request.get(name, &GetParams::default()),
    }
    .context("cannot build the get request")?;
    let body: Value = client.request(with_accept(req, shape)).await?;
    if body["kind"] == "Table" {
        return Ok(parse_page(body, &target.resolved));
    }
    let resource_version = body["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_owned();
    Ok(Page { resource_version, items: vec![object_item(body, &target.resolved)], ..Page::default() })
}

/// The raw lines of a watch; each is one JSON event.
#[allow(clippy::disallowed_methods)] // GET requests only: a list page, one object, a watch
pub async fn watch_lines(
    client: &Client,
    target: &Target,
    wp: &WatchParams,
    resource_version: &str,
    shape: ReadAs,
) -> Result<impl Stream<Item = std::io::Result<String>> + use<>, kube::Error> {
    let req = Request::new(target.path()).watch(wp, resource_version).map_err(kube::Error::BuildRequest)?;
    let body = client.request_stream(with_accept(req, shape)).await?;
    Ok(body.lines().try_filter(|line| futures::future::ready(!line.is_empty())))
}

/// A Table or a list of objects, as `Item`s.
pub fn parse_page(mut body: Value, resolved: &Resolved) -> Page {
    let meta = body["metadata"].take();
    let resource_version = meta["resourceVersion"].as_str().unwrap_or_default().to_owned();
    let continue_token = meta["continue"].as_str().filter(|c| !c.is_empty()).map(str::to_owned);
    if body["kind"] == "Table" {
        let columns = serde_json::from_value(body["columnDefinitions"].take()).ok();
        let items = match body["rows"].take() {
            Value::Array(rows) => rows.into_iter().map(row_item).collect(),
            _ => Vec::new(),
        };
        return Page { resource_version, continue_token, columns, items };
    }
    let items = match body["items"].take() {
        Value::Array(objects) => objects.into_iter().map(|o| object_item(o, resolved)).collect(),
        _ => Vec::new(),
    };
    Page { resource_version, continue_token, columns: None, items }
}

/// A Table row; its `object` is the row's PartialObjectMetadata, or the whole object when it was asked
/// for (`ReadAs::TableWithObjects`), which the item then keeps.
pub fn row_item(mut row: Value) -> Item {
    let cells = match row["cells"].take() {
        Value::Array(cells) => cells,
        _ => Vec::new(),
    };
    let mut item = metadata_item(&row["object"]["metadata"]);
    item.cells = Some(cells);
    if !matches!(row["object"]["kind"].as_str(), None | Some("PartialObjectMetadata")) {
        item.object = Some(row["object"].take());
    }
    item
}

/// A whole object, with the apiVersion and kind that list items leave out (an object that has its own,
/// such as a subresource's `Scale`, keeps them).
pub fn object_item(mut object: Value, resolved: &Resolved) -> Item {
    if let Some(map) = object.as_object_mut() {
        map.entry("apiVersion").or_insert_with(|| resolved.ar.api_version.clone().into());
        map.entry("kind").or_insert_with(|| resolved.ar.kind.clone().into());
    }
    let mut item = metadata_item(&object["metadata"]);
    item.object = Some(object);
    item
}

fn metadata_item(meta: &Value) -> Item {
    let text = |key: &str| meta[key].as_str().unwrap_or_default().to_owned();
    let labels = meta["labels"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned())).collect())
        .unwrap_or_default();
    Item {
        uid: text("uid"),
        resource_version: text("resourceVersion"),
        namespace: meta["namespace"].as_str().map(str::to_owned),
        name: text("name"),
        labels,
        creation_timestamp: meta["creationTimestamp"].as_str().map(str::to_owned),
        cells: None,
        object: None,
    }
}
