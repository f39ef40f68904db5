//! Kubernetes resource quantities (`500m`, `1.5Gi`, `2e3`, `100k`) read as the integers the
//! scheduler compares: millicores for `cpu` and whole units, rounded up, for everything else, as
//! apimachinery's `Quantity.MilliValue()` and `Quantity.Value()` do; and sums of them written
//! back in apimachinery's canonical form ([`canonical`]: `1500m`, `2k`, `256Mi`), as quota
//! usage and admission messages show them.

/// A parsed quantity: `mantissa × 10^decimal × 2^binary` (one of the exponents is zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    mantissa: i128,
    decimal: i32,
    binary: u32,
}

/// The most a value may be: larger quantities read as this (apimachinery caps at int64 too).
const MAX: i128 = i64::MAX as i128;

impl Quantity {
    /// Parses the canonical and non-canonical forms kube-apiserver accepts; `None` for
    /// anything else.
    pub fn parse(text: &str) -> Option<Quantity> {
        let text = text.trim();
        let (negative, rest) = match text.as_bytes().first()? {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_end);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
            return None;
        }
        // Digits beyond what i128 holds would only be precision nobody asks for.
        let digits = format!("{whole}{fraction}");
        let digits = digits.trim_start_matches('0');
        if digits.len() > 30 {
            return None;
        }
        let mut mantissa: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().ok()?
        };
        if negative {
            mantissa = -mantissa;
        }
        let mut decimal = -(fraction.len() as i32);
        let mut binary = 0;
        match suffix {
            "" => {}
            "Ki" => binary = 10,
            "Mi" => binary = 20,
            "Gi" => binary = 30,
            "Ti" => binary = 40,
            "Pi" => binary = 50,
            "Ei" => binary = 60,
            "n" => decimal -= 9,
            "u" => decimal -= 6,
            "m" => decimal -= 3,
            "k" => decimal += 3,
            "M" => decimal += 6,
            "G" => decimal += 9,
            "T" => decimal += 12,
            "P" => decimal += 15,
            "E" => decimal += 18,
            exponent => {
                let exponent = exponent
                    .strip_prefix('e')
                    .or_else(|| exponent.strip_prefix('E'))?;
                let value: i32 = exponent.parse().ok()?;
                if !(-30..=30).contains(&value) {
                    return None;
                }
                decimal += value;
            }
        }
        Some(Quantity {
            mantissa,
            decimal,
            binary,
        })
    }

    /// The value in thousandths, rounded up (`Quantity.MilliValue()`).
    pub fn milli(&self) -> i64 {
        self.scaled(3)
    }

    /// The value in whole units, rounded up (`Quantity.Value()`).
    pub fn value(&self) -> i64 {
        self.scaled(0)
    }

    /// The value × 10^`shift`, rounded up, clamped to i64.
    fn scaled(&self, shift: i32) -> i64 {
        let mut n = self.mantissa;
        for _ in 0..self.binary {
            n = n.saturating_mul(2);
        }
        let exponent = self.decimal + shift;
        let n = if exponent >= 0 {
            let mut n = n;
            for _ in 0..exponent {
                n = n.saturating_mul(10);
            }
            n
        } else {
            let divisor = 10i128.saturating_pow(exponent.unsigned_abs());
            let quotient = n / divisor;
            // Round up: towards positive infinity, as inf.Dec rounding with RoundUp does for
            // the positive quantities requests are.
            if n % divisor > 0 {
                quotient + 1
            } else {
                quotient
            }
        };
        n.clamp(-MAX, MAX) as i64
    }
}

impl Quantity {
    /// Whether the quantity was written with a binary suffix (`Ki` … `Ei`): a sum keeps the
    /// format of what it adds up, as apimachinery's `Add` keeps the first operand's.
    pub fn is_binary(&self) -> bool {
        self.binary > 0
    }
}

/// `milli` thousandths in apimachinery's canonical form: the largest binary suffix that
/// leaves a whole number when `binary` (else, or when none does, decimal), otherwise the
/// largest decimal suffix (`m`, none, `k` … `E`) that does.
pub fn canonical(milli: i64, binary: bool) -> String {
    let negative = milli < 0;
    let sign = if negative { "-" } else { "" };
    let milli = i128::from(milli).abs();
    if milli % 1000 != 0 {
        return format!("{sign}{milli}m");
    }
    let mut value = milli / 1000;
    if value == 0 {
        return "0".into();
    }
    if binary {
        const SUFFIXES: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
        let mut shifted = value;
        let mut used = None;
        for suffix in SUFFIXES {
            if shifted % 1024 != 0 {
                break;
            }
            shifted /= 1024;
            used = Some(suffix);
        }
        if let Some(suffix) = used {
            return format!("{sign}{shifted}{suffix}");
        }
    }
    const SUFFIXES: [&str; 6] = ["k", "M", "G", "T", "P", "E"];
    let mut used = "";
    for suffix in SUFFIXES {
        if value % 1000 != 0 {
            break;
        }
        value /= 1000;
        used = suffix;
    }
    format!("{sign}{value}{used}")
}

/// `resource`'s quantity as the scheduler counts it: millicores for cpu, units otherwise.
/// An unreadable quantity counts as zero (kube-apiserver never stores one).
pub fn amount(resource: &str, text: &str) -> i64 {
    match Quantity::parse(text) {
        Some(q) if resource == "cpu" => q.milli(),
        Some(q) => q.value(),
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_are_written_in_canonical_form() {
        for (milli, binary, text) in [
            (500, false, "500m"),
            (1500, false, "1500m"),
            (2000, false, "2"),
            (2_000_000, false, "2k"),
            (0, true, "0"),
            (268_435_456_000, true, "256Mi"),
            (1_536_000, true, "1536"),
            (1_500_000_000_000, false, "1500M"),
            (-3000, false, "-3"),
        ] {
            assert_eq!(canonical(milli, binary), text, "{milli} {binary}");
        }
        assert!(Quantity::parse("1Gi").unwrap().is_binary());
        assert!(!Quantity::parse("1G").unwrap().is_binary());
    }

    #[test]
    fn quantities_read_as_apimachinery_reads_them() {
        let cases: &[(&str, i64, i64)] = &[
            // text, milli, value
            ("1", 1000, 1),
            ("500m", 500, 1),
            ("0.5", 500, 1),
            ("100m", 100, 1),
            ("1.5", 1500, 2),
            ("2", 2000, 2),
            ("0", 0, 0),
            ("1Ki", 1_024_000, 1024),
            ("1.5Gi", 1_610_612_736_000, 1_610_612_736),
            ("8Gi", 8_589_934_592_000, 8_589_934_592),
            ("200Mi", 209_715_200_000, 209_715_200),
            ("1k", 1_000_000, 1000),
            ("1M", 1_000_000_000, 1_000_000),
            ("1G", 1_000_000_000_000, 1_000_000_000),
            ("2e3", 2_000_000, 2000),
            ("1E3", 1_000_000, 1000),
            ("1E", i64::MAX, 1_000_000_000_000_000_000),
            ("1n", 1, 1),
            ("1u", 1, 1),
            ("1500u", 2, 1),
            ("+3", 3000, 3),
            (".5", 500, 1),
            ("100Gi", 107_374_182_400_000, 107_374_182_400),
            ("1Ei", i64::MAX, 1_152_921_504_606_846_976),
        ];
        for (text, milli, value) in cases {
            let q = Quantity::parse(text).unwrap_or_else(|| panic!("{text} parses"));
            assert_eq!(q.milli(), *milli, "{text} milli");
            assert_eq!(q.value(), *value, "{text} value");
        }
        for bad in ["", "m", "1.2.3", "1x", "1Kib", "abc", "1e", "--1", "1e99"] {
            assert!(Quantity::parse(bad).is_none(), "{bad:?}");
        }
        assert_eq!(amount("cpu", "250m"), 250);
        assert_eq!(amount("memory", "1Mi"), 1_048_576);
        assert_eq!(amount("memory", "nonsense"), 0);
    }
}
