//! shell-operator's hooks, without a cluster: a hook's `--config` read and checked (`config`, its shape
//! in `schema`), crontabs (`cron`), jqFilters (`jq`), and the binding contexts a run is given with the
//! queue rules that are pure (`context`: combining, group compaction, retry delays), and the webhooks'
//! response files, reviews and conversion chains (`webhook`). The runner is
//! `controller::drive::events`.

pub mod config;
pub mod context;
pub mod cron;
pub mod jq;
pub mod metrics;
pub mod patch;
pub mod schema;
pub mod webhook;
