//! Reading a Chrome trace event by event: the JSON is parsed as it is read
//! and each event handed over at once, so memory holds one event's text at
//! a time, not the document (a 313 MB trace once took 4.9 GB as a value tree).
//!
//! Accepted shapes: a bare array of events, or an object whose
//! `traceEvents` member is that array (other members are skipped).

use std::fmt;
use std::io::Read;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

/// A `pid` or `tid`: a number, or a string some tools write instead.
#[derive(Debug)]
pub enum Id {
    Num(u64),
    Name(String),
    Invalid,
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Id, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Id;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number or a string")
            }
            fn visit_u64<E>(self, v: u64) -> Result<Id, E> {
                Ok(Id::Num(v))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Id, E> {
                Ok(Id::Invalid)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Id, E> {
                Ok(Id::Invalid)
            }
            fn visit_str<E>(self, v: &str) -> Result<Id, E> {
                Ok(Id::Name(v.to_owned()))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Id, E> {
                Ok(Id::Invalid)
            }
            fn visit_unit<E>(self) -> Result<Id, E> {
                Ok(Id::Invalid)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Id, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Id::Invalid)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Id, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Id::Invalid)
            }
        }
        d.deserialize_any(V)
    }
}

/// A number of microseconds, or something that is not one.
#[derive(Debug, Clone, Copy)]
pub struct Micros(pub Option<f64>);

impl<'de> Deserialize<'de> for Micros {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Micros, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        Ok(Micros(v.as_f64()))
    }
}

/// `args.name` of a metadata event; anything else in `args` is skipped,
/// whatever its shape.
#[derive(Debug, Default)]
pub struct ArgName(pub Option<String>);

impl<'de> Deserialize<'de> for ArgName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ArgName, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ArgName;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("event arguments")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<ArgName, A::Error> {
                let mut name = None;
                while let Some(k) = a.next_key::<String>()? {
                    if k == "name" {
                        let v: serde_json::Value = a.next_value()?;
                        name = v.as_str().map(str::to_owned);
                    } else {
                        a.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(ArgName(name))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<ArgName, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(ArgName(None))
            }
            fn visit_str<E>(self, _: &str) -> Result<ArgName, E> {
                Ok(ArgName(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<ArgName, E> {
                Ok(ArgName(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<ArgName, E> {
                Ok(ArgName(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<ArgName, E> {
                Ok(ArgName(None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<ArgName, E> {
                Ok(ArgName(None))
            }
            fn visit_unit<E>(self) -> Result<ArgName, E> {
                Ok(ArgName(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// One trace event, with only the members lapse reads.
#[derive(Debug, Deserialize)]
pub struct TraceEvent {
    pub ph: Option<String>,
    pub name: Option<String>,
    pub cat: Option<String>,
    pub pid: Option<Id>,
    pub tid: Option<Id>,
    pub ts: Option<Micros>,
    pub dur: Option<Micros>,
    pub args: Option<ArgName>,
}

/// Why reading stopped.
#[derive(Debug)]
pub enum StreamError<E> {
    /// The JSON itself is broken (or not the expected shape: `shape`).
    Json {
        source: serde_json::Error,
        shape: bool,
    },
    /// Event number `index` is not an object.
    NotAnObject { index: usize },
    /// The handler refused event number `index`.
    Handler { index: usize, error: E },
}

/// Calls `each(index, event)` for every event of the trace read from
/// `reader`, in file order.
pub fn for_each_event<R: Read, E>(
    reader: R,
    mut each: impl FnMut(usize, TraceEvent) -> Result<(), E>,
) -> Result<(), StreamError<E>> {
    let mut state = State {
        each: &mut each,
        index: 0,
        failed: None,
    };
    let mut de = serde_json::Deserializer::from_reader(reader);
    let r = (&mut de).deserialize_any(Top(&mut state));
    if let Some(f) = state.failed.take() {
        return Err(f);
    }
    r.and_then(|()| de.end()).map_err(|source| {
        let shape = source.classify() == serde_json::error::Category::Data;
        StreamError::Json { source, shape }
    })
}

struct State<'a, E> {
    each: &'a mut dyn FnMut(usize, TraceEvent) -> Result<(), E>,
    index: usize,
    /// The error that stopped the walk (the serde error it raised only unwinds).
    failed: Option<StreamError<E>>,
}

/// The document: an array of events, or an object holding one.
struct Top<'s, 'a, E>(&'s mut State<'a, E>);

impl<'de, E> Visitor<'de> for Top<'_, '_, E> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of trace events or an object with \"traceEvents\"")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> Result<(), A::Error> {
        Events(self.0).visit_seq(a)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<(), A::Error> {
        let mut found = false;
        while let Some(k) = a.next_key::<String>()? {
            if k == "traceEvents" && !found {
                found = true;
                a.next_value_seed(Events(&mut *self.0))?;
            } else {
                a.next_value::<IgnoredAny>()?;
            }
        }
        if found {
            Ok(())
        } else {
            Err(de::Error::custom("no \"traceEvents\" member"))
        }
    }
}

struct Events<'s, 'a, E>(&'s mut State<'a, E>);

impl<'de, E> DeserializeSeed<'de> for Events<'_, '_, E> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, E> Visitor<'de> for Events<'_, '_, E> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of trace events")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<(), A::Error> {
        let st = self.0;
        while let Some(ev) = a.next_element::<Element>()? {
            let index = st.index;
            st.index += 1;
            let Element(Some(ev)) = ev else {
                st.failed = Some(StreamError::NotAnObject { index });
                return Err(de::Error::custom("stopped"));
            };
            if let Err(error) = (st.each)(index, ev) {
                st.failed = Some(StreamError::Handler { index, error });
                return Err(de::Error::custom("stopped"));
            }
        }
        Ok(())
    }
}

/// An array element: an event object, or `None` for anything else.
struct Element(Option<TraceEvent>);

impl<'de> Deserialize<'de> for Element {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Element, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Element;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a trace event")
            }
            fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<Element, A::Error> {
                TraceEvent::deserialize(de::value::MapAccessDeserializer::new(a))
                    .map(|e| Element(Some(e)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Element, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Element(None))
            }
            fn visit_str<E>(self, _: &str) -> Result<Element, E> {
                Ok(Element(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Element, E> {
                Ok(Element(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Element, E> {
                Ok(Element(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Element, E> {
                Ok(Element(None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Element, E> {
                Ok(Element(None))
            }
            fn visit_unit<E>(self) -> Result<Element, E> {
                Ok(Element(None))
            }
        }
        d.deserialize_any(V)
    }
}
