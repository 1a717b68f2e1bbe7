//! Every config a stream has, one model for every way in: the SDK's and the CLI's stream
//! properties and a Kafka topic's configs are the same names, types, ranges and defaults
//! (Kafka 4.4's topic configs, `LogConfig`, and Lakelog's own `lake.*`), checked here once;
//! and a Kafka group's configs (Kafka 4.4's `GroupConfig`), checked the same way.
//!
//! A [`Configs`] holds only the configs set, each in its canonical spelling; the typed
//! accessors answer what the roles act on. Each table ([`DEFS`], [`GROUP_DEFS`]) says of each
//! config whether it is [`Effect::Honoured`] here or [`Effect::Kept`]: stored and reported as
//! set, with no effect here (segments, flushes, replicas; share groups, not built yet).
//! docs/topic-configs.md and docs/group-configs.md list both, checked against the tables.
//!
//! Depends on nothing but `thiserror`; the catalog stores a [`StreamConfig`] with each stream,
//! the Kafka front end answers DescribeConfigs and the config-altering APIs over the tables.

use std::collections::BTreeMap;

/// A config's type, as Kafka's DescribeConfigs names it (v3+'s `config_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Type {
    Boolean,
    String,
    Int,
    Long,
    Double,
    List,
}

impl Type {
    /// Kafka's code for the type in DescribeConfigs.
    pub fn kafka_code(self) -> i8 {
        match self {
            Type::Boolean => 1,
            Type::String => 2,
            Type::Int => 3,
            Type::Long => 5,
            Type::Double => 6,
            Type::List => 7,
        }
    }
}

/// What a config does here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Lakelog acts on it.
    Honoured,
    /// Stored and reported as set, with no effect here (the reason).
    Kept(&'static str),
}

/// Which values a config takes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Valid {
    /// Any value of the type.
    Any,
    /// A number at least this.
    AtLeast(i64),
    /// A number in `[low, high]`.
    Between(i64, i64),
    /// A number in `[low, high]` or exactly -1 (gzip's default level).
    BetweenOrMinusOne(i64, i64),
    /// A fraction in `[0, 1]`.
    Fraction,
    /// One of these (case as written).
    OneOf(&'static [&'static str]),
    /// A non-empty list of these.
    ListOf(&'static [&'static str]),
    /// `*`, or a list of `partition:broker` pairs (the replication throttles).
    Replicas,
    /// A list of at most this many items, each at most [`MAX_ITEM_BYTES`].
    Items(usize),
    /// Empty, or a topic's name (at most 249 bytes), not an internal one (`__…`).
    TopicName,
    /// `earliest`, `latest` or `by_duration:` an ISO-8601 duration, not negative (a share
    /// group's start).
    OffsetReset,
}

/// The longest item of a [`Valid::Items`] list.
const MAX_ITEM_BYTES: usize = 255;

/// One config: its name, type, default, the values it takes, what it does here, a line of
/// documentation (DescribeConfigs v3+ sends it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Def {
    pub name: &'static str,
    pub ty: Type,
    /// The value a stream has when it is not set, as DescribeConfigs shows it.
    pub default: &'static str,
    valid: Valid,
    pub effect: Effect,
    pub doc: &'static str,
}

const fn def(
    name: &'static str,
    ty: Type,
    default: &'static str,
    valid: Valid,
    effect: Effect,
    doc: &'static str,
) -> Def {
    Def { name, ty, default, valid, effect, doc }
}

use Type::{Boolean, Double, Int, List, Long};
use Valid::*;

mod group;
mod topic;

pub use group::{GROUP_DEFS, Group, GroupConfig};
pub use topic::{COMPACT, Cleanup, DEFS, DELETE, StreamConfig, Topic, find};

/// The config named `name` in `defs` (sorted by name).
pub fn find_in(defs: &'static [Def], name: &str) -> Option<&'static Def> {
    defs.binary_search_by(|d| d.name.cmp(name)).ok().map(|i| &defs[i])
}

/// An ISO-8601 duration (`PnDTnHnMn.nS`, as Java's `Duration.parse` reads it, without signs)
/// in milliseconds; `None` when it is not one, or overflows.
pub fn iso8601_ms(s: &str) -> Option<u64> {
    let s = s.to_ascii_uppercase();
    let rest = s.strip_prefix('P')?;
    let (days, time) = match rest.split_once('T') {
        Some((d, t)) if !t.is_empty() => (d, Some(t)),
        Some(_) => return None,
        None => (rest, None),
    };
    if days.is_empty() && time.is_none() {
        return None;
    }
    let mut ms: u64 = 0;
    let mut add = |n: u64, unit: u64| -> Option<()> {
        ms = ms.checked_add(n.checked_mul(unit)?)?;
        Some(())
    };
    if !days.is_empty() {
        let n = days.strip_suffix('D')?;
        add(digits(n)?, 86_400_000)?;
    }
    let Some(mut t) = time else { return Some(ms) };
    for (unit, per) in [('H', 3_600_000), ('M', 60_000)] {
        if let Some((n, rest)) = t.split_once(unit) {
            add(digits(n)?, per)?;
            t = rest;
        }
    }
    if !t.is_empty() {
        let n = t.strip_suffix('S')?;
        let (whole, frac) = n.split_once(['.', ',']).unwrap_or((n, ""));
        if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        add(digits(whole)?, 1000)?;
        let frac_ms = format!("{frac:0<3}");
        add(frac_ms[..3].parse().ok()?, 1)?;
    }
    Some(ms)
}

/// A run of ASCII digits as a number.
fn digits(s: &str) -> Option<u64> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten()
}

/// What a [`Configs`] holds: a table of configs, and what they must be together.
pub trait Table:
    Clone + Copy + std::fmt::Debug + Default + PartialEq + Eq + Send + Sync + 'static
{
    /// Every config, sorted by name.
    const DEFS: &'static [Def];

    /// Checks the configs together.
    fn check(c: &Configs<Self>) -> Result<(), Invalid>;
}

/// The configs set of a thing (a stream, a group), by name, each in its canonical spelling.
/// Every other config of table `T` has its [`Def::default`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Configs<T: Table> {
    /// Shared: a route carries its stream's configs to every produce, so a clone is a count,
    /// not a copy of the map (changed copy-on-write).
    set: std::sync::Arc<BTreeMap<String, String>>,
    table: std::marker::PhantomData<T>,
}

impl<T: Table> Configs<T> {
    /// Configs `pairs` set over the defaults, each checked; then checked together.
    pub fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, Invalid> {
        let mut c = Self::default();
        for (name, value) in pairs {
            c.set(name, value)?;
        }
        c.check()?;
        Ok(c)
    }

    /// The config named `name` in this table.
    pub fn def(name: &str) -> Option<&'static Def> {
        find_in(T::DEFS, name)
    }

    /// Sets config `name` to `value` (checked alone; [`Self::check`] checks them together).
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), Invalid> {
        let def = Self::def(name).ok_or_else(|| Invalid::Unknown(name.to_owned()))?;
        let canonical = def.check(value)?;
        std::sync::Arc::make_mut(&mut self.set).insert(def.name.to_owned(), canonical);
        Ok(())
    }

    /// Puts config `name` back to its default.
    pub fn reset(&mut self, name: &str) -> Result<(), Invalid> {
        let def = Self::def(name).ok_or_else(|| Invalid::Unknown(name.to_owned()))?;
        if self.set.contains_key(def.name) {
            std::sync::Arc::make_mut(&mut self.set).remove(def.name);
        }
        Ok(())
    }

    /// Config `name` as set, if it is.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.set.get(name).map(String::as_str)
    }

    /// The configs set, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.set.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Whether none is set.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// Config `name`'s value and whether it is set; `None` for a name not in the table.
    pub fn value(&self, name: &str) -> Option<(&str, bool)> {
        let def = Self::def(name)?;
        Some(match self.set.get(def.name) {
            Some(v) => (v.as_str(), true),
            None => (def.default, false),
        })
    }

    /// Config `name`'s value as a number (`i64::MAX` when it is not one).
    fn number(&self, name: &str) -> i64 {
        self.value(name).and_then(|(v, _)| v.parse().ok()).unwrap_or(i64::MAX)
    }

    /// Checks the configs together.
    pub fn check(&self) -> Result<(), Invalid> {
        T::check(self)
    }
}

/// A config value refused, or a name no stream has.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("unknown config name {0}")]
    Unknown(String),
    #[error("invalid value {value} for config {name}: {reason}")]
    Value { name: String, value: String, reason: String },
    #[error("{0}")]
    Together(String),
}

impl Def {
    /// `value` in its canonical spelling, or why it is refused.
    pub fn check(&self, value: &str) -> Result<String, Invalid> {
        let refuse = |reason: String| Invalid::Value {
            name: self.name.to_owned(),
            value: value.to_owned(),
            reason,
        };
        let v = value.trim();
        let canonical = match self.ty {
            Boolean => match v.to_ascii_lowercase().as_str() {
                b @ ("true" | "false") => b.to_owned(),
                _ => return Err(refuse("expected true or false".into())),
            },
            Int => {
                let n = v.parse::<i32>().map_err(|_| refuse("expected a 32-bit integer".into()))?;
                self.in_range(i64::from(n)).map_err(refuse)?;
                n.to_string()
            }
            Long => {
                let n = v.parse::<i64>().map_err(|_| refuse("expected a 64-bit integer".into()))?;
                self.in_range(n).map_err(refuse)?;
                n.to_string()
            }
            Double => {
                let x = v.parse::<f64>().map_err(|_| refuse("expected a number".into()))?;
                if !(0.0..=1.0).contains(&x) {
                    return Err(refuse("expected a value in [0, 1]".into()));
                }
                x.to_string()
            }
            Type::String => {
                self.check_string(v).map_err(refuse)?;
                v.to_owned()
            }
            List => {
                let items: Vec<&str> =
                    v.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
                self.check_list(&items).map_err(refuse)?;
                items.join(",")
            }
        };
        Ok(canonical)
    }

    fn check_string(&self, v: &str) -> Result<(), String> {
        match self.valid {
            OneOf(values) if !values.contains(&v) => {
                Err(format!("expected one of {}", values.join(", ")))
            }
            TopicName if v.len() > 249 => Err("a topic's name is at most 249 bytes".into()),
            TopicName if v.starts_with("__") => Err("not an internal topic (__…)".into()),
            OffsetReset => match v.strip_prefix("by_duration:") {
                _ if v == "earliest" || v == "latest" => Ok(()),
                Some(d) if iso8601_ms(d).is_some() => Ok(()),
                _ => {
                    Err("expected earliest, latest or by_duration:<PnDTnHnMn.nS>, not negative"
                        .into())
                }
            },
            _ => Ok(()),
        }
    }

    fn in_range(&self, n: i64) -> Result<(), String> {
        match self.valid {
            AtLeast(low) if n < low => Err(format!("expected at least {low}")),
            Between(low, high) if n < low || n > high => {
                Err(format!("expected a value in [{low}, {high}]"))
            }
            BetweenOrMinusOne(low, high) if n != -1 && (n < low || n > high) => {
                Err(format!("expected -1 or a value in [{low}, {high}]"))
            }
            _ => Ok(()),
        }
    }

    fn check_list(&self, items: &[&str]) -> Result<(), String> {
        match self.valid {
            ListOf(values) => {
                if items.is_empty() {
                    return Err(format!("expected a list of {}", values.join(", ")));
                }
                match items.iter().find(|i| !values.contains(i)) {
                    Some(i) => Err(format!("{i} is not one of {}", values.join(", "))),
                    None => Ok(()),
                }
            }
            Items(most) if items.len() > most => Err(format!("at most {most} items")),
            Items(_) if items.iter().any(|i| i.len() > MAX_ITEM_BYTES) => {
                Err(format!("an item is at most {MAX_ITEM_BYTES} bytes"))
            }
            Replicas if items == ["*"] => Ok(()),
            Replicas => {
                let pair = |i: &&str| {
                    i.split_once(':').is_some_and(|(p, b)| {
                        p.trim().parse::<u32>().is_ok() && b.trim().parse::<u32>().is_ok()
                    })
                };
                match items.iter().find(|i| !pair(i)) {
                    Some(i) => Err(format!("{i}: expected partition:broker or *")),
                    None => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// docs/`file`'s table has one row per config of `defs`, in order, each as it is.
    pub(crate) fn assert_documented(defs: &[Def], file: &str) {
        let path = format!("{}/../../docs/{file}", env!("CARGO_MANIFEST_DIR"));
        let doc = std::fs::read_to_string(&path).expect(file);
        let rows: Vec<&str> = doc.lines().filter(|l| l.starts_with("| `")).collect();
        assert_eq!(rows.len(), defs.len(), "{file}: one row per config");
        for (row, d) in rows.iter().zip(defs) {
            let here = match d.effect {
                Effect::Honoured => "honoured".to_owned(),
                Effect::Kept(why) => format!("kept: {why}"),
            };
            let want = format!(
                "| `{}` | {} | `{}` | {here} | {} |",
                d.name,
                format!("{:?}", d.ty).to_lowercase(),
                d.default,
                d.doc
            );
            assert_eq!(*row, want, "docs/{file}");
        }
    }

    /// Every default of `defs` is valid and spelled as its check spells it; `defs` is sorted.
    pub(crate) fn assert_defaults_valid(defs: &[Def]) {
        assert!(defs.windows(2).all(|w| w[0].name < w[1].name), "sorted: find searches them");
        for d in defs.iter().filter(|d| !d.default.is_empty()) {
            assert_eq!(d.check(d.default).as_deref(), Ok(d.default), "{}", d.name);
        }
    }
}
