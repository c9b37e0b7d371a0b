//! Kubernetes resource quantities ("100m", "1.5Gi", "2e3", "1k"), parsed exactly.
//!
//! Values are kept as nano-units in an `i128`, enough for every suffix up to `E`/`Ei`
//! with nine decimal places; anything finer is rounded up, as Kubernetes does when it
//! asks for `MilliValue()`/`Value()`.

use thiserror::Error;

const NANO: i128 = 1_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Quantity {
    nanos: i128,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum QuantityError {
    #[error("empty quantity")]
    Empty,
    #[error("quantity {0:?} is not a number with an optional suffix (e.g. 500m, 2Gi, 1e3)")]
    Syntax(String),
    #[error("quantity {0:?} is out of range")]
    Range(String),
}

impl Quantity {
    pub fn from_nanos(nanos: i128) -> Self {
        Quantity { nanos }
    }

    /// Thousandths of a unit, rounded up (CPU in millicores).
    pub fn milli_ceil(&self) -> i64 {
        clamp_i64(div_ceil(self.nanos, 1_000_000))
    }

    /// Whole units, rounded up (bytes, counts).
    pub fn value_ceil(&self) -> i64 {
        clamp_i64(div_ceil(self.nanos, NANO))
    }
}

fn clamp_i64(v: i128) -> i64 {
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

fn div_ceil(a: i128, b: i128) -> i128 {
    let q = a / b;
    if a % b > 0 {
        q + 1
    } else {
        q
    }
}

/// Parses a quantity in the Kubernetes serialization format:
/// `<sign><digits>[.<digits>]<suffix>` where suffix is a binary SI (`Ki`..`Ei`),
/// a decimal SI (`n`, `u`, `m`, ``, `k`, `M`, `G`, `T`, `P`, `E`) or an exponent (`e3`, `E-2`).
pub fn parse(input: &str) -> Result<Quantity, QuantityError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(QuantityError::Empty);
    }
    let syntax = || QuantityError::Syntax(input.to_string());
    let range = || QuantityError::Range(input.to_string());

    let (negative, rest) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(num_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return Err(syntax());
    }
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));

    // Scale expressed as (multiplier, power of ten), applied to the mantissa.
    let (mult, exp10): (i128, i32) = match suffix {
        "" => (1, 0),
        "n" => (1, -9),
        "u" => (1, -6),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        other if other.starts_with(['e', 'E']) => {
            let e: i32 = other[1..].parse().map_err(|_| syntax())?;
            if !(-30..=30).contains(&e) {
                return Err(range());
            }
            (1, e)
        }
        _ => return Err(syntax()),
    };

    // mantissa = int_part.frac_part; nanos = mantissa * mult * 10^(exp10 + 9)
    let digits = int_part.bytes().chain(frac_part.bytes()).skip_while(|b| *b == b'0');
    let mut mantissa: i128 = 0;
    for (n, b) in digits.enumerate() {
        if n >= 30 {
            return Err(range());
        }
        mantissa = mantissa * 10 + i128::from(b - b'0');
    }
    let scale = exp10 + 9 - frac_part.len() as i32;
    let base = mantissa.checked_mul(mult).ok_or_else(range)?;
    let nanos = if scale >= 0 {
        base.checked_mul(10i128.checked_pow(scale as u32).ok_or_else(range)?).ok_or_else(range)?
    } else {
        let div = 10i128.checked_pow((-scale) as u32).unwrap_or(i128::MAX);
        div_ceil(base, div)
    };
    // Kubernetes quantities are bounded well below this; refuse absurd values early.
    if nanos > 10i128.pow(30) {
        return Err(range());
    }
    Ok(Quantity { nanos: if negative { -nanos } else { nanos } })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn milli(s: &str) -> i64 {
        parse(s).unwrap().milli_ceil()
    }
    fn val(s: &str) -> i64 {
        parse(s).unwrap().value_ceil()
    }

    #[test]
    fn cpu_forms() {
        assert_eq!(milli("100m"), 100);
        assert_eq!(milli("1"), 1000);
        assert_eq!(milli("1.5"), 1500);
        assert_eq!(milli("0.1"), 100);
        assert_eq!(milli("2500m"), 2500);
        assert_eq!(milli("1e3"), 1_000_000);
        assert_eq!(milli("1E-3"), 1);
        assert_eq!(milli("1u"), 1, "sub-milli rounds up");
        assert_eq!(milli("0"), 0);
    }

    #[test]
    fn memory_forms() {
        assert_eq!(val("1Gi"), 1 << 30);
        assert_eq!(val("64Mi"), 64 << 20);
        assert_eq!(val("1.5Gi"), 3 << 29);
        assert_eq!(val("1G"), 1_000_000_000);
        assert_eq!(val("128974848"), 128_974_848);
        assert_eq!(val("129e6"), 129_000_000);
        assert_eq!(val("123Mi"), 123 * 1024 * 1024);
        assert_eq!(val("100Gi"), 100 << 30);
        assert_eq!(val("1Ei"), 1 << 60);
        assert_eq!(val("1m"), 1, "fractional bytes round up");
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "abc", "1.2.3", "1Zi", "--1", "1 Gi", ".", "1e", "Gi"] {
            assert!(parse(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(matches!(parse("1e99"), Err(QuantityError::Range(_))));
    }

    proptest! {
        #[test]
        fn integer_milli_roundtrip(n in 0i64..10_000_000) {
            prop_assert_eq!(milli(&format!("{n}m")), n);
            prop_assert_eq!(milli(&format!("{n}")), n * 1000);
        }

        #[test]
        fn binary_suffixes_scale(n in 0i64..100_000, i in 0usize..4) {
            let (suffix, shift) = [("Ki", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40)][i];
            prop_assert_eq!(val(&format!("{n}{suffix}")), n << shift);
        }

        #[test]
        fn decimal_fraction_equals_milli(whole in 0i64..100_000, frac in 0i64..1000) {
            let s = format!("{whole}.{frac:03}");
            prop_assert_eq!(milli(&s), whole * 1000 + frac);
        }

        #[test]
        fn exponent_equals_plain(n in 0i64..1_000_000, e in 0u32..6) {
            prop_assert_eq!(val(&format!("{n}e{e}")), n * 10i64.pow(e));
        }

        #[test]
        fn never_panics(s in "\\PC{0,24}") {
            let _ = parse(&s);
        }
    }
}
