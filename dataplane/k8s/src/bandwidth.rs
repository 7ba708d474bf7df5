// SPDX-License-Identifier: Apache-2.0
//! Pods' rate limits from their `kubernetes.io/ingress-bandwidth` and
//! `kubernetes.io/egress-bandwidth` annotations, read as kubelet reads them
//! (k8s.io/kubernetes/pkg/util/bandwidth): a resource quantity in bits per
//! second, from 1k to 1P after rounding up to a whole bit. A value outside
//! that, or no quantity at all, is refused: that way stays unlimited and the
//! refusal is a problem (status, an Event on the pod).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub const INGRESS_ANNOTATION: &str = "kubernetes.io/ingress-bandwidth";
pub const EGRESS_ANNOTATION: &str = "kubernetes.io/egress-bandwidth";

/// Kubelet's bounds, in bits per second.
pub const MIN_BITS_PER_SECOND: u64 = 1_000;
pub const MAX_BITS_PER_SECOND: u64 = 1_000_000_000_000_000;

/// A pod's limits in bits per second; `None`: unlimited that way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodLimits {
    pub ingress: Option<u64>,
    pub egress: Option<u64>,
}

impl PodLimits {
    pub fn is_limited(&self) -> bool {
        self.ingress.is_some() || self.egress.is_some()
    }
}

/// The limits a pod's annotations ask for, and what is wrong with those that
/// ask for something this node cannot do (each named by its annotation).
pub fn pod_limits(annotations: Option<&BTreeMap<String, String>>) -> (PodLimits, Vec<String>) {
    let mut limits = PodLimits::default();
    let mut problems = Vec::new();
    let Some(annotations) = annotations else { return (limits, problems) };
    for (key, slot) in [(INGRESS_ANNOTATION, &mut limits.ingress), (EGRESS_ANNOTATION, &mut limits.egress)] {
        let Some(value) = annotations.get(key) else { continue };
        match bits_per_second(value) {
            Ok(bits) => *slot = Some(bits),
            Err(why) => problems.push(format!("{key}: \"{value}\" {why}; that way is not limited")),
        }
    }
    (limits, problems)
}

/// A bandwidth quantity, checked against kubelet's bounds.
pub fn bits_per_second(text: &str) -> Result<u64, String> {
    let value = quantity_ceil(text)?;
    if value < i128::from(MIN_BITS_PER_SECOND) {
        return Err("is unreasonably small (< 1kbit)".into());
    }
    if value > i128::from(MAX_BITS_PER_SECOND) {
        return Err("is unreasonably large (> 1Pbit)".into());
    }
    Ok(value as u64)
}

/// A Kubernetes resource quantity (apimachinery's grammar: a signed decimal
/// number, then a binary suffix Ki..Ei, a decimal one n, u, m, k, M..E, or an
/// exponent e/E), rounded up to an integer as Quantity.Value() rounds;
/// clamped to ±10^33, far beyond any bound a caller checks.
pub fn quantity_ceil(text: &str) -> Result<i128, String> {
    let malformed = || "is no quantity (like 10M, 1.5G or 500Ki)".to_string();
    let (negative, rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let number_len = rest.bytes().take_while(|b| b.is_ascii_digit() || *b == b'.').count();
    let (number, suffix) = rest.split_at(number_len);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return Err(malformed());
    }
    // The value is digits * 10^decimal * 2^binary.
    let mut decimal = -(fraction.len() as i64);
    let mut binary = 0u32;
    match suffix {
        "" => {}
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => binary = 10 * (1 + "KMGTPE".find(&suffix[..1]).unwrap_or(0) as u32),
        "n" => decimal -= 9,
        "u" => decimal -= 6,
        "m" => decimal -= 3,
        "k" => decimal += 3,
        "M" => decimal += 6,
        "G" => decimal += 9,
        "T" => decimal += 12,
        "P" => decimal += 15,
        "E" => decimal += 18,
        s if s.starts_with(['e', 'E']) => {
            let exponent = &s[1..];
            let unsigned = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) || unsigned.len() > 6 {
                return Err(malformed());
            }
            decimal += exponent.parse::<i64>().map_err(|_| malformed())?;
        }
        _ => return Err(malformed()),
    }
    let all = format!("{whole}{fraction}");
    let mut digits = all.trim_start_matches('0').to_string();
    if digits.is_empty() {
        return Ok(0);
    }
    // 18 significant digits are kept; a non-zero digit beyond them rounds
    // the result up by one (far past any bound a caller checks).
    let mut dropped = false;
    if digits.len() > 18 {
        dropped = digits[18..].bytes().any(|b| b != b'0');
        decimal += digits.len() as i64 - 18;
        digits.truncate(18);
    }
    let magnitude = digits.len() as i64 + decimal + i64::from(binary) * 3 / 10;
    const CLAMP: i128 = 1_000_000_000_000_000_000_000_000_000_000_000;
    let round = |up: bool| -> i128 {
        match (negative, up) {
            (false, true) => 1,
            _ => 0,
        }
    };
    if magnitude > 33 {
        return Ok(if negative { -CLAMP } else { CLAMP });
    }
    if magnitude < -1 {
        // Strictly between 0 and 1 (or -1 and 0).
        return Ok(round(true));
    }
    let mut numerator: u128 = digits.parse().map_err(|_| malformed())?;
    let mut denominator: u128 = 1;
    if decimal >= 0 {
        numerator *= 10u128.pow(decimal as u32);
    } else {
        denominator = 10u128.pow((-decimal) as u32);
    }
    numerator <<= binary;
    let whole = (numerator / denominator) as i128;
    let inexact = !numerator.is_multiple_of(denominator) || dropped;
    let value = whole.min(CLAMP) + if inexact { round(true) } else { 0 };
    Ok(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotated(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn quantities_as_apimachinery_reads_them() {
        for (text, value) in [
            ("10M", 10_000_000),
            ("10Mi", 10 * 1024 * 1024),
            ("1.5G", 1_500_000_000),
            ("1.5Ki", 1536),
            ("100k", 100_000),
            ("1e3", 1000),
            ("1E9", 1_000_000_000),
            ("2.5e-1", 1),
            ("1500m", 2),
            ("1000000", 1_000_000),
            (".5k", 500),
            ("5.", 5),
            ("+7", 7),
            ("-1M", -1_000_000),
            ("0", 0),
            ("0.000M", 0),
            ("1n", 1),
            ("1P", 1_000_000_000_000_000),
            ("1Ei", 1 << 60),
        ] {
            assert_eq!(quantity_ceil(text), Ok(value), "{text}");
        }
        assert_eq!(quantity_ceil("9e999"), Ok(1_000_000_000_000_000_000_000_000_000_000_000));
        for text in ["", "M", "10 M", "10MB", "ten", "1.2.3", "10Mi ", "1e", "1e+", "0x10", "10mi", "1k5", "--1"] {
            assert!(quantity_ceil(text).is_err(), "{text:?} taken");
        }
    }

    #[test]
    fn kubelet_bounds_one_kbit_to_one_pbit() {
        assert_eq!(bits_per_second("1k"), Ok(1000));
        assert_eq!(bits_per_second("1P"), Ok(MAX_BITS_PER_SECOND));
        assert_eq!(bits_per_second("999"), Err("is unreasonably small (< 1kbit)".into()));
        assert_eq!(bits_per_second("0"), Err("is unreasonably small (< 1kbit)".into()));
        assert_eq!(bits_per_second("-10M"), Err("is unreasonably small (< 1kbit)".into()));
        assert_eq!(bits_per_second("1.1P"), Err("is unreasonably large (> 1Pbit)".into()));
        assert_eq!(bits_per_second("9e999"), Err("is unreasonably large (> 1Pbit)".into()));
    }

    #[test]
    fn each_annotation_alone_a_bad_one_unlimited_and_named() {
        assert_eq!(pod_limits(None), (PodLimits::default(), vec![]));
        let (limits, problems) = pod_limits(Some(&annotated(&[(EGRESS_ANNOTATION, "10M"), ("other", "x")])));
        assert_eq!(limits, PodLimits { ingress: None, egress: Some(10_000_000) });
        assert!(problems.is_empty());
        let (limits, problems) = pod_limits(Some(&annotated(&[(INGRESS_ANNOTATION, "fast"), (EGRESS_ANNOTATION, "1G")])));
        assert_eq!(limits, PodLimits { ingress: None, egress: Some(1_000_000_000) });
        assert_eq!(
            problems,
            ["kubernetes.io/ingress-bandwidth: \"fast\" is no quantity (like 10M, 1.5G or 500Ki); that way is not limited"]
        );
    }
}
