//! Decoding: an Avro binary datum read by its shape and handed to serde, strings and
//! bytes borrowed from the datum.

use serde::de::value::{BorrowedStrDeserializer, StrDeserializer};
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};
use serde::{forward_to_deserialize_any, Deserialize};

use super::refused::{refuse, Refused};
use super::shape::{Field, Shape};

/// Reads a value from the datum at the start of `datum` (bytes after it are ignored,
/// as apache-avro's reader ignores them).
pub fn read<'de, T: Deserialize<'de>>(shape: &Shape, datum: &'de [u8]) -> Result<T, Refused> {
    T::deserialize(Reader { shape, input: &mut &datum[..] })
}

struct Reader<'a, 'de> {
    shape: &'a Shape,
    input: &'a mut &'de [u8],
}

fn truncated() -> Refused {
    Refused("the datum ends early".into())
}

impl<'de> Reader<'_, 'de> {
    fn take(&mut self, n: usize) -> Result<&'de [u8], Refused> {
        if n > self.input.len() {
            return Err(truncated());
        }
        let (taken, rest) = self.input.split_at(n);
        *self.input = rest;
        Ok(taken)
    }

    fn long(&mut self) -> Result<i64, Refused> {
        let mut z = 0u64;
        for (i, &byte) in self.input.iter().enumerate().take(10) {
            z |= u64::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                *self.input = &self.input[i + 1..];
                return Ok((z >> 1) as i64 ^ -((z & 1) as i64));
            }
        }
        Err(Refused("a long that does not end within ten bytes, or the datum's end".into()))
    }

    fn length_prefixed(&mut self) -> Result<&'de [u8], Refused> {
        match usize::try_from(self.long()?) {
            Ok(n) => self.take(n),
            Err(_) => Err(Refused("a negative length".into())),
        }
    }

    fn str(&mut self) -> Result<&'de str, Refused> {
        std::str::from_utf8(self.length_prefixed()?).map_err(|e| Refused(format!("a string that is not UTF-8: {e}")))
    }

    fn symbol<'s>(&mut self, symbols: &'s [String]) -> Result<&'s str, Refused> {
        let index = self.long()?;
        match usize::try_from(index).ok().and_then(|i| symbols.get(i)) {
            Some(symbol) => Ok(symbol),
            None => Err(Refused(format!("enum index {index} beyond its {} symbols", symbols.len()))),
        }
    }

    /// A nullable's branch: the present value's shape, or none.
    fn branch<'s>(&mut self, present: &'s Shape, null_index: u8) -> Result<Option<&'s Shape>, Refused> {
        match self.long()? {
            i if i == i64::from(null_index) => Ok(None),
            i if i == i64::from(1 - null_index) => Ok(Some(present)),
            i => Err(Refused(format!("union index {i} of a two-branch union"))),
        }
    }
}

impl<'de> de::Deserializer<'de> for Reader<'_, 'de> {
    type Error = Refused;

    fn deserialize_any<V: Visitor<'de>>(mut self, visitor: V) -> Result<V::Value, Refused> {
        match self.shape {
            Shape::Null => visitor.visit_unit(),
            Shape::Boolean => match self.take(1)? {
                [0] => visitor.visit_bool(false),
                [1] => visitor.visit_bool(true),
                _ => Err(Refused("a boolean that is neither 0 nor 1".into())),
            },
            Shape::Int => match i32::try_from(self.long()?) {
                Ok(v) => visitor.visit_i32(v),
                Err(_) => Err(Refused("an int beyond 32 bits".into())),
            },
            Shape::Long => visitor.visit_i64(self.long()?),
            Shape::Float => visitor.visit_f32(f32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes"))),
            Shape::Double => visitor.visit_f64(f64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes"))),
            Shape::Bytes => visitor.visit_borrowed_bytes(self.length_prefixed()?),
            Shape::String => visitor.visit_borrowed_str(self.str()?),
            Shape::Enum(symbols) => visitor.visit_str(self.symbol(symbols)?),
            Shape::Record(fields) => visitor.visit_map(RecordReader { fields, next: 0, input: self.input }),
            Shape::Nullable { present, null_index } => match self.branch(present, *null_index)? {
                None => visitor.visit_none(),
                Some(shape) => visitor.visit_some(Reader { shape, input: self.input }),
            },
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        match self.shape {
            Shape::Nullable { .. } => self.deserialize_any(visitor),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        mut self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Refused> {
        match self.shape {
            Shape::Enum(symbols) => {
                let symbol: StrDeserializer<Refused> = self.symbol(symbols)?.into_deserializer();
                visitor.visit_enum(symbol)
            }
            Shape::String => visitor.visit_enum(BorrowedStrDeserializer::<Refused>::new(self.str()?)),
            shape => refuse(shape, "an enum"),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _: &'static str, visitor: V) -> Result<V::Value, Refused> {
        visitor.visit_newtype_struct(self)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit
        unit_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}

/// A record's fields, as a map from the schema's names to the values in its order.
struct RecordReader<'a, 'de> {
    fields: &'a [Field],
    next: usize,
    input: &'a mut &'de [u8],
}

impl<'de> MapAccess<'de> for RecordReader<'_, 'de> {
    type Error = Refused;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Refused> {
        match self.fields.get(self.next) {
            Some(field) => seed.deserialize(field.name.as_str().into_deserializer()).map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Refused> {
        let field = &self.fields[self.next];
        self.next += 1;
        seed.deserialize(Reader { shape: &field.shape, input: self.input })
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.fields.len() - self.next)
    }
}

#[cfg(test)]
mod tests {
    use apache_avro::reader::datum::GenericDatumReader;
    use vigil_datagen::rng::Draw;
    use vigil_datagen::traffic::Traffic;
    use vigil_model::output::EnrichedPayment;
    use vigil_model::topology::ENRICHED_PAYMENTS;

    use super::read;
    use crate::avro_direct::tests::{schema, shape};
    use crate::avro_direct::write;

    #[test]
    fn reads_no_damaged_datum_that_apache_avro_refuses_or_reads_otherwise() {
        let traffic = Traffic::new(3, 1_700_000_000_000, 0);
        let draw = Draw::new(5);
        let (shape, schema) = (shape(&ENRICHED_PAYMENTS), schema(&ENRICHED_PAYMENTS));
        let reader = GenericDatumReader::builder(&schema).build().unwrap();
        let (mut read_here, mut refused_here) = (0, 0);
        for i in 0..3000 {
            let (Some(order), Some(payment)) = (traffic.order(i), traffic.payment(i)) else { continue };
            let enriched = vigil_operators::join_enrich::enrich(payment, Some(&order), 0.01);
            let mut bytes = Vec::new();
            write(&shape, &enriched, &mut bytes).unwrap();
            // One to three bytes set to anything: lengths, union and enum indexes,
            // booleans and UTF-8 all get hit.
            for k in 0..draw.range(i, 0, 1, 3) as u64 {
                let at = draw.range(i, 1 + k, 0, bytes.len() as i64 - 1) as usize;
                bytes[at] = draw.range(i, 10 + k, 0, 255) as u8;
            }
            match read::<EnrichedPayment>(&shape, &bytes) {
                Ok(here) => {
                    let there = reader.read_deser::<EnrichedPayment>(&mut &bytes[..]);
                    assert_eq!(there.ok().as_ref(), Some(&here), "{bytes:?}");
                    read_here += 1;
                }
                Err(_) => refused_here += 1,
            }
        }
        assert!(read_here > 100 && refused_here > 100, "read {read_here}, refused {refused_here}");
    }
}
