//! `sfu-load --soak`: the steady window as a soak. Every `--soak-sample-s` seconds
//! (10) it samples the server's resident memory and what the node says it holds
//! (`/metrics`: peers, tracks, subscriptions, associations, data channels and
//! World entities, summed over shards, and the node's participants); after the load
//! has left it waits (at most a minute) for those counts to come back to what they
//! were before the first join. `soak.csv` has every sample, `soak.png` plots them,
//! and the report gives the memory's slope: a least-squares line through the
//! samples of the window's last four fifths (the first fifth is still warming up),
//! in KiB and in per cent of its mean per 10 minutes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use plotters::prelude::*;

/// What the node holds, from `/metrics`.
pub(super) const COUNTS: [(&str, &str); 7] = [
    ("shoal_shard_peers", "peers"),
    ("shoal_shard_tracks", "tracks"),
    ("shoal_shard_subscriptions", "subscriptions"),
    ("shoal_shard_associations", "associations"),
    ("shoal_shard_data_channels", "data channels"),
    ("shoal_shard_entities", "entities"),
    ("shoal_participants", "participants"),
];

/// One sample.
#[derive(Clone, Debug)]
pub(super) struct Sample {
    /// Seconds since the window started.
    pub at_s: f64,
    pub rss_kib: Option<u64>,
    pub counts: Option<[u64; COUNTS.len()]>,
}

/// What a soak recorded.
#[derive(Clone, Debug, Default)]
pub(super) struct Soak {
    pub samples: Vec<Sample>,
    /// The counts before the first join.
    pub baseline: Option<[u64; COUNTS.len()]>,
    /// The counts once the load had left, and how long that took; `None` if they
    /// did not come back within the wait.
    pub settled: Option<([u64; COUNTS.len()], Duration)>,
    /// The last counts seen while waiting.
    pub last: Option<[u64; COUNTS.len()]>,
}

/// The node's counts now (each summed over its shards).
pub(super) fn counts(http: SocketAddr) -> Result<[u64; COUNTS.len()], String> {
    let mut s =
        TcpStream::connect_timeout(&http, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(|e| e.to_string())?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .ok_or("a response without a header")?;
    let mut out = [0u64; COUNTS.len()];
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        let Some((key, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = key.split('{').next().unwrap_or_default();
        if let Some(i) = COUNTS.iter().position(|(n, _)| *n == name) {
            out[i] += value.parse::<f64>().unwrap_or(0.0) as u64;
        }
    }
    Ok(out)
}

/// Waits up to a minute for the counts to come back to `baseline`.
pub(super) fn settle(soak: &mut Soak, http: SocketAddr) {
    let Some(baseline) = soak.baseline else {
        return;
    };
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        if let Ok(now) = counts(http) {
            soak.last = Some(now);
            if now == baseline {
                soak.settled = Some((now, started.elapsed()));
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The memory's least-squares slope over the samples after the first fifth of the
/// window: (KiB per 10 minutes, per cent of the mean per 10 minutes).
pub(super) fn slope(samples: &[Sample]) -> Option<(f64, f64)> {
    let end = samples.last()?.at_s;
    let points: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| s.at_s >= end / 5.0)
        .filter_map(|s| Some((s.at_s, s.rss_kib? as f64)))
        .collect();
    if points.len() < 3 {
        return None;
    }
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if sxx == 0.0 || my == 0.0 {
        return None;
    }
    let per_10_min = sxy / sxx * 600.0;
    Some((per_10_min, per_10_min / my * 100.0))
}

/// Markdown for the report.
pub(super) fn markdown(soak: &Soak) -> String {
    let mut s = String::from("\n## Soak\n\n");
    let last = soak.samples.last();
    s += &format!(
        "{} samples over {:.0} s. ",
        soak.samples.len(),
        last.map_or(0.0, |l| l.at_s)
    );
    match slope(&soak.samples) {
        Some((kib, pct)) => {
            s += &format!(
                "Server RSS slope after the first fifth: {kib:+.0} KiB per 10 minutes ({pct:+.2} % of its mean per 10 minutes). "
            );
        }
        None => s += "Too few samples for an RSS slope. ",
    }
    let names: Vec<&str> = COUNTS.iter().map(|(_, n)| *n).collect();
    match (&soak.baseline, &soak.settled, &soak.last) {
        (Some(b), Some((_, took)), _) => {
            s += &format!(
                "After the load left, every count ({}) was back at its value before the first join ({b:?}) after {:.1} s.\n",
                names.join(", "),
                took.as_secs_f64()
            );
        }
        (Some(b), None, last) => {
            s += &format!(
                "After the load left, the counts ({}) did **not** come back within a minute: {last:?}, before the first join {b:?}.\n",
                names.join(", ")
            );
        }
        _ => s += "The node's counts could not be read.\n",
    }
    s += "\n![memory and counts over the soak](soak.png)\n";
    s
}

/// Writes `soak.csv` and `soak.png` into `dir`.
pub(super) fn write(soak: &Soak, dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut csv = String::from("seconds,rss_kib");
    for (_, n) in COUNTS {
        csv += &format!(",{}", n.replace(' ', "_"));
    }
    csv.push('\n');
    for sample in &soak.samples {
        csv += &format!(
            "{:.1},{}",
            sample.at_s,
            sample.rss_kib.map_or(String::new(), |r| r.to_string())
        );
        for i in 0..COUNTS.len() {
            csv += &format!(
                ",{}",
                sample.counts.map_or(String::new(), |c| c[i].to_string())
            );
        }
        csv.push('\n');
    }
    let csv_path = dir.join("soak.csv");
    std::fs::write(&csv_path, csv).map_err(|e| format!("{}: {e}", csv_path.display()))?;
    let png = dir.join("soak.png");
    draw(soak, &png)?;
    Ok(vec![csv_path, png])
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn draw(soak: &Soak, path: &Path) -> Result<(), String> {
    let root = BitMapBackend::new(path, (900, 700)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (upper, lower) = root.split_vertically(350);
    let end = soak.samples.last().map_or(1.0, |s| s.at_s).max(1.0);
    let rss: Vec<(f64, f64)> = soak
        .samples
        .iter()
        .filter_map(|s| Some((s.at_s, s.rss_kib? as f64 / 1024.0)))
        .collect();
    let top = rss.iter().map(|p| p.1).fold(1.0, f64::max) * 1.2;
    let mut chart = ChartBuilder::on(&upper)
        .caption("server RSS over the soak", ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..end, 0f64..top)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("RSS, MiB")
        .draw()
        .map_err(err)?;
    chart
        .draw_series(LineSeries::new(rss, BLUE.stroke_width(2)))
        .map_err(err)?;
    let most = soak
        .samples
        .iter()
        .filter_map(|s| s.counts)
        .flat_map(|c| c.into_iter())
        .max()
        .unwrap_or(1) as f64
        * 1.2;
    let mut chart = ChartBuilder::on(&lower)
        .caption("what the node holds", ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..end, 0f64..most.max(1.0))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("count")
        .draw()
        .map_err(err)?;
    for (k, (_, name)) in COUNTS.iter().enumerate() {
        let color = Palette99::pick(k).to_rgba();
        let points: Vec<(f64, f64)> = soak
            .samples
            .iter()
            .filter_map(|s| Some((s.at_s, s.counts?[k] as f64)))
            .collect();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(err)?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::{Sample, slope};

    fn at(at_s: f64, rss: u64) -> Sample {
        Sample {
            at_s,
            rss_kib: Some(rss),
            counts: None,
        }
    }

    #[test]
    fn the_slope_is_a_least_squares_line_past_the_first_fifth() {
        // Flat at 1 000 KiB, but a warm-up ramp in the first fifth that is left out.
        let mut samples: Vec<Sample> = (0..=10u32).map(|i| at(f64::from(i) * 60.0, 1000)).collect();
        samples[0].rss_kib = Some(100);
        let (kib, pct) = slope(&samples).unwrap();
        assert!(kib.abs() < 1e-9 && pct.abs() < 1e-9, "{kib} {pct}");
        // 10 KiB a minute: 100 KiB per 10 minutes.
        let rising: Vec<Sample> = (0..=10u32)
            .map(|i| at(f64::from(i) * 60.0, 1000 + 10 * u64::from(i)))
            .collect();
        let (kib, _) = slope(&rising).unwrap();
        assert!((kib - 100.0).abs() < 1e-6, "{kib}");
        assert!(slope(&rising[..2]).is_none());
    }
}
