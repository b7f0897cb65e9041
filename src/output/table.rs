//! Tables as kubectl prints them: upper-cased headers, columns left-aligned and three spaces apart, at
//! least six wide, no trailing spaces. Pages are printed as they arrive; a column never narrows, so later
//! pages line up with earlier ones as far as their own cells allow.

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde_json::Value;
use tabled::grid::util::string::get_text_width;

use crate::cluster::read::{Column, Item};

const GAP: usize = 3;
const MIN_WIDTH: usize = 6;

/// Which columns to print and how to fill them from an `Item`.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Indices into the server's Table cells; `None` when the server sent no Table (NAME and AGE then).
    cells: Option<Vec<usize>>,
    headers: Vec<String>,
    namespace: bool,
    labels: bool,
    label_columns: Vec<String>,
    event: bool,
    escape: bool,
}

#[derive(Debug, Clone, Default)]
pub struct LayoutOptions {
    pub wide: bool,
    pub namespace: bool,
    pub labels: bool,
    /// `-L KEY`: a column for each of these labels' values.
    pub label_columns: Vec<String>,
    pub event: bool,
    /// Show what a terminal would act on escaped (stdout is a terminal); see `output::terminal`.
    pub escape: bool,
}

impl Layout {
    pub fn new(columns: Option<&[Column]>, opts: LayoutOptions) -> Self {
        let (cells, names) = match columns {
            Some(columns) => {
                // Priority 0 columns are the standard view; the others only appear with -o wide.
                let picked: Vec<usize> =
                    (0..columns.len()).filter(|&i| opts.wide || columns[i].priority == 0).collect();
                let names = picked.iter().map(|&i| columns[i].name.to_uppercase()).collect();
                (Some(picked), names)
            }
            None => (None, vec!["NAME".to_owned(), "AGE".to_owned()]),
        };
        let mut headers = Vec::new();
        if opts.event {
            headers.push("EVENT".to_owned());
        }
        if opts.namespace {
            headers.push("NAMESPACE".to_owned());
        }
        headers.extend(names);
        // kubectl heads a label column with the key's last segment: app.kubernetes.io/name is NAME.
        headers.extend(opts.label_columns.iter().map(|key| key.rsplit('/').next().unwrap_or(key).to_uppercase()));
        if opts.labels {
            headers.push("LABELS".to_owned());
        }
        Layout {
            cells,
            headers,
            namespace: opts.namespace,
            labels: opts.labels,
            label_columns: opts.label_columns,
            event: opts.event,
            escape: opts.escape,
        }
    }

    pub fn headers(&self) -> &[String] {
        &self.headers
    }

    pub fn row(&self, item: &Item, event: Option<&str>) -> Vec<String> {
        let mut row = Vec::with_capacity(self.headers.len());
        if self.event {
            row.push(event.unwrap_or_default().to_owned());
        }
        if self.namespace {
            row.push(item.namespace.clone().unwrap_or_default());
        }
        match &self.cells {
            Some(picked) => {
                let cells = item.cells.as_deref().unwrap_or_default();
                let text = |cell: &Value| cell_text(cell, !self.escape);
                row.extend(picked.iter().map(|&i| cells.get(i).map(text).unwrap_or_default()));
            }
            None => {
                row.push(item.name.clone());
                row.push(item.creation_timestamp.as_deref().map(age).unwrap_or_else(|| "<unknown>".to_owned()));
            }
        }
        row.extend(self.label_columns.iter().map(|key| item.labels.get(key).cloned().unwrap_or_default()));
        if self.labels {
            row.push(label_text(&item.labels));
        }
        if self.escape {
            for cell in &mut row {
                if let std::borrow::Cow::Owned(escaped) = super::terminal::escape(cell) {
                    *cell = escaped;
                }
            }
        }
        row
    }
}

/// A Table cell as kubectl shows it: nothing for null, only the first line of multi-line text, and with
/// `kubectl_escapes`, ESC written `^[` as kubectl's `printers.EscapeTerminal` writes it (left to
/// `output::terminal` otherwise, which escapes more).
fn cell_text(cell: &Value, kubectl_escapes: bool) -> String {
    let text = match cell {
        Value::Null => return String::new(),
        Value::String(s) => s.clone(),
        other => return other.to_string(),
    };
    let text = match text.find(['\n', '\r', '\x0c']) {
        Some(cut) => format!("{}...", &text[..cut]),
        None => text,
    };
    match kubectl_escapes && text.contains('\x1b') {
        true => text.replace('\x1b', "^["),
        false => text,
    }
}

fn label_text(labels: &BTreeMap<String, String>) -> String {
    if labels.is_empty() {
        return "<none>".to_owned();
    }
    // Sorted as the joined `key=value` strings, as apimachinery's labels.Set.String() sorts them:
    // `app.kubernetes.io/name=x` comes before `app=y`.
    let mut pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.sort();
    pairs.join(",")
}

/// Age of an RFC 3339 timestamp in kubectl's short form (`45s`, `3m12s`, `5h`, `12d`).
fn age(timestamp: &str) -> String {
    match timestamp.parse::<k8s_openapi::jiff::Timestamp>() {
        Ok(created) => {
            let seconds = k8s_openapi::jiff::Timestamp::now().as_second() - created.as_second();
            human_duration(seconds)
        }
        Err(_) => "<unknown>".to_owned(),
    }
}

/// k8s.io/apimachinery's `duration.HumanDuration`, to the same cut-offs.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        return match seconds % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{}d", hours / 24),
            h => format!("{}d{h}h", hours / 24),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        return match (hours / 24) % 365 {
            0 => format!("{}y", hours / 24 / 365),
            d => format!("{}y{d}d", hours / 24 / 365),
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// Writes rows in batches (a page, a watch event) with the header once before the first batch.
pub struct TableWriter<W: Write> {
    out: W,
    header: Option<Vec<String>>,
    widths: Vec<usize>,
    /// The terminal's width, when long cells are cut to fit it.
    limit: Option<usize>,
    /// How wide a cell is: in characters piped, as kubectl's tabwriter counts (a combining accent or a
    /// wide CJK character counts one); in terminal columns on a terminal, so that columns line up there.
    width_of: fn(&str) -> usize,
}

fn characters(text: &str) -> usize {
    text.chars().count()
}

/// The narrowest a cell is cut to, however narrow the terminal.
const MIN_CUT: usize = 8;

impl<W: Write> TableWriter<W> {
    /// `header: None` prints no header (`--no-headers`).
    pub fn new(out: W, header: Option<Vec<String>>) -> Self {
        TableWriter { out, header, widths: Vec::new(), limit: None, width_of: characters }
    }

    /// Measures cells in terminal columns rather than characters, when stdout is a terminal.
    pub fn on_terminal(mut self, terminal: bool) -> Self {
        self.width_of = if terminal { |text| get_text_width(text) } else { characters };
        self
    }

    /// Cuts the widest cells, ending them in `…`, so that rows fit `width` columns where they can
    /// (headers are never cut). `None` keeps kubectl's layout, every cell whole.
    pub fn fit_to(mut self, width: Option<usize>) -> Self {
        self.limit = width;
        self
    }

    /// Makes a column at least wide enough for text of this width, before any row needs it.
    pub fn reserve(&mut self, column: usize, text_width: usize) {
        if self.widths.len() <= column {
            self.widths.resize(column + 1, 0);
        }
        self.widths[column] = self.widths[column].max(text_width + GAP).max(MIN_WIDTH);
    }

    pub fn write_rows(&mut self, rows: &[Vec<String>]) -> io::Result<()> {
        let header = self.header.take();
        let records: Vec<&Vec<String>> = header.iter().chain(rows).collect();
        let Some(columns) = records.iter().map(|r| r.len()).max().filter(|&n| n > 0) else {
            return Ok(());
        };
        self.widths.resize(columns.max(self.widths.len()), 0);
        for record in &records {
            for (i, cell) in record.iter().enumerate().take(columns - 1) {
                self.widths[i] = self.widths[i].max((self.width_of)(cell) + GAP).max(MIN_WIDTH);
            }
        }

        let mut last = records.iter().filter_map(|r| r.get(columns - 1)).map(|c| (self.width_of)(c)).max().unwrap_or(0);
        if let Some(limit) = self.limit {
            last = self.fit(limit, columns, last, header.as_ref());
        }

        // Every cell but the last is padded to its column's width and the last is written as it is, as
        // kubectl's tabwriter does: a line ends in spaces only when its last cell is empty.
        for record in &records {
            let mut line = String::new();
            for (i, width) in self.widths.iter().enumerate().take(columns - 1) {
                let cell = self.cut(record.get(i).map_or("", String::as_str), width - GAP);
                line.push_str(&cell);
                line.extend(std::iter::repeat_n(' ', width.saturating_sub((self.width_of)(&cell))));
            }
            line.push_str(&self.cut(record.get(columns - 1).map_or("", String::as_str), last));
            writeln!(self.out, "{line}")?;
        }
        self.out.flush()
    }

    /// Where rows go, for output written beside them.
    pub fn out_mut(&mut self) -> &mut W {
        &mut self.out
    }

    pub fn into_inner(self) -> W {
        self.out
    }

    /// `text` cut to `width` when fitting a terminal; whole otherwise, without measuring it.
    fn cut<'a>(&self, text: &'a str, width: usize) -> std::borrow::Cow<'a, str> {
        match self.limit {
            Some(_) => cut(text, width),
            None => std::borrow::Cow::Borrowed(text),
        }
    }

    /// Narrows the widest column, one step at a time, until a row fits `limit` or no column can give up
    /// more (none narrower than its header, nor than [`MIN_CUT`]). Returns the last column's width.
    fn fit(&mut self, limit: usize, columns: usize, mut last: usize, header: Option<&Vec<String>>) -> usize {
        let floor = |i: usize| {
            let head = header.and_then(|h| h.get(i)).map_or(0, |h| (self.width_of)(h));
            if i + 1 == columns { head.max(MIN_CUT) } else { (head + GAP).max(MIN_CUT + GAP).max(MIN_WIDTH) }
        };
        loop {
            let total: usize = self.widths.iter().take(columns - 1).sum::<usize>() + last;
            if total <= limit {
                return last;
            }
            // The column with the most to give, counting the last one by its text.
            let widest = (0..columns)
                .map(|i| (i, if i + 1 == columns { last } else { self.widths[i] }))
                .filter(|&(i, width)| width > floor(i))
                .max_by_key(|&(_, width)| width);
            let Some((i, width)) = widest else { return last };
            let step = (total - limit).min(width - floor(i));
            match i + 1 == columns {
                true => last -= step,
                false => self.widths[i] -= step,
            }
        }
    }
}

/// `text` cut to `width` columns, its last one `…`, or all of it if it fits.
fn cut(text: &str, width: usize) -> std::borrow::Cow<'_, str> {
    if get_text_width(text) <= width {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = get_text_width(c.encode_utf8(&mut [0; 4]));
        if used + w + 1 > width {
            break;
        }
        out.push(c);
        used += w;
    }
    out.push('…');
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(batches: &[&[&[&str]]], header: Option<&[&str]>) -> String {
        let mut writer = TableWriter::new(Vec::new(), header.map(|h| h.iter().map(|s| s.to_string()).collect()));
        for batch in batches {
            let rows: Vec<Vec<String>> = batch.iter().map(|r| r.iter().map(|s| s.to_string()).collect()).collect();
            writer.write_rows(&rows).unwrap();
        }
        String::from_utf8(writer.into_inner()).unwrap()
    }

    #[test]
    fn aligned_like_kubectl() {
        // Taken from `kubectl get samples` on the local cluster.
        let out = render(
            &[&[&["sample-resource-1", "first sample resource", "", "0s"]]],
            Some(&["NAME", "TEST STRING", "READY", "AGE"]),
        );
        assert_eq!(
            out,
            "NAME                TEST STRING             READY   AGE\nsample-resource-1   first sample resource           0s\n"
        );
    }

    #[test]
    fn later_pages_never_narrow_a_column() {
        let out = render(&[&[&["a-long-name", "1"]], &[&["b", "2"]]], Some(&["NAME", "N"]));
        assert_eq!(out, "NAME          N\na-long-name   1\nb             2\n");
    }

    #[test]
    fn no_header_and_wide_characters() {
        // Piped, as kubectl's tabwriter counts: characters, so a wide one counts one (and the column is
        // kubectl's minimum of 6).
        let out = render(&[&[&["日本", "x"], &["ab", "y"]]], None);
        assert_eq!(out, "日本    x\nab    y\n");
        // On a terminal, columns: two each for 日 and 本, none for a combining accent.
        let mut terminal = TableWriter::new(Vec::new(), None).on_terminal(true);
        let rows = [["日本", "x"], ["ab", "y"], ["e\u{301}", "z"]].map(|r| r.map(String::from).to_vec());
        terminal.write_rows(&rows).unwrap();
        assert_eq!(String::from_utf8(terminal.into_inner()).unwrap(), "日本   x\nab     y\ne\u{301}      z\n");
    }

    #[test]
    fn layout_picks_columns_and_extras() {
        let columns = vec![
            Column { name: "Name".into(), priority: 0 },
            Column { name: "Data".into(), priority: 0 },
            Column { name: "Node".into(), priority: 1 },
        ];
        let item = Item {
            uid: "u".into(),
            resource_version: "1".into(),
            namespace: Some("ns".into()),
            name: "n".into(),
            labels: [("b".to_owned(), "2".to_owned()), ("a".to_owned(), "1".to_owned())].into(),
            creation_timestamp: None,
            cells: Some(vec!["n".into(), 3.into(), Value::Null]),
            object: None,
        };
        let plain = Layout::new(Some(&columns), LayoutOptions::default());
        assert_eq!(plain.headers(), ["NAME", "DATA"]);
        assert_eq!(plain.row(&item, None), ["n", "3"]);
        let label_columns = vec!["b".to_owned(), "example.com/missing".to_owned()];
        let all =
            LayoutOptions { wide: true, namespace: true, labels: true, label_columns, event: true, escape: false };
        let wide = Layout::new(Some(&columns), all);
        assert_eq!(wide.headers(), ["EVENT", "NAMESPACE", "NAME", "DATA", "NODE", "B", "MISSING", "LABELS"]);
        assert_eq!(wide.row(&item, Some("ADDED")), ["ADDED", "ns", "n", "3", "", "2", "", "a=1,b=2"]);
        let fallback = Layout::new(None, LayoutOptions::default());
        assert_eq!(fallback.headers(), ["NAME", "AGE"]);
        assert_eq!(fallback.row(&item, None), ["n", "<unknown>"]);
    }

    #[test]
    fn an_empty_last_cell_keeps_the_padding_before_it_as_kubectl_does() {
        let out = render(&[&[&["a", "web"], &["b", ""]]], Some(&["NAME", "APP"]));
        assert_eq!(out, "NAME   APP\na      web\nb      \n");
    }

    #[test]
    fn labels_sort_as_their_key_value_strings() {
        let labels = [("app", "web"), ("app.kubernetes.io/name", "thing")].map(|(k, v)| (k.to_owned(), v.to_owned()));
        assert_eq!(label_text(&labels.into()), "app.kubernetes.io/name=thing,app=web");
    }

    #[test]
    fn long_cells_are_cut_to_fit_only_when_asked() {
        let long = "x".repeat(200);
        let rows = vec![vec!["a".to_owned(), long.clone(), "1s".to_owned()]];
        let header = Some(vec!["NAME".to_owned(), "TEST STRING".to_owned(), "AGE".to_owned()]);
        let mut whole = TableWriter::new(Vec::new(), header.clone());
        whole.write_rows(&rows).unwrap();
        let whole = String::from_utf8(whole.into_inner()).unwrap();
        assert!(whole.contains(&long), "kubectl's layout by default");
        let mut fit = TableWriter::new(Vec::new(), header).fit_to(Some(40));
        fit.write_rows(&rows).unwrap();
        let fit = String::from_utf8(fit.into_inner()).unwrap();
        assert_eq!(fit, format!("NAME   TEST STRING{}AGE\na      {}…   1s\n", " ".repeat(19), "x".repeat(26)));
        assert!(fit.lines().all(|l| get_text_width(l) <= 40), "{fit}");
        // Too narrow to fit: cut down to the floors, no further.
        let mut narrow = TableWriter::new(Vec::new(), None).fit_to(Some(5));
        narrow.write_rows(&rows).unwrap();
        let narrow = String::from_utf8(narrow.into_inner()).unwrap();
        assert_eq!(narrow, "a     xxxxxxx…   1s\n");
    }

    #[test]
    fn cells_show_only_their_first_line() {
        assert_eq!(cell_text(&"one\ntwo".into(), true), "one...");
        assert_eq!(cell_text(&true.into(), true), "true");
        assert_eq!(cell_text(&"\x1b]0;t\x07x\ry".into(), true), "^[]0;t\x07x...", "as kubectl, piped");
        assert_eq!(cell_text(&"\x1b]0;t\x07x".into(), false), "\x1b]0;t\x07x", "for output::terminal to escape");
    }

    #[test]
    fn durations_match_apimachinery() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (190, "3m10s"),
            (600, "10m"),
            (179 * 60, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60, "3h1m"),
            (47 * 3600, "47h"),
            (2 * 86400, "2d"),
            (2 * 86400 + 3600, "2d1h"),
            (30 * 86400, "30d"),
            (3 * 365 * 86400, "3y"),
            (3 * 365 * 86400 + 86400, "3y1d"),
            (9 * 365 * 86400, "9y"),
        ];
        for (seconds, want) in cases {
            assert_eq!(human_duration(seconds), want, "{seconds}");
        }
    }
}
