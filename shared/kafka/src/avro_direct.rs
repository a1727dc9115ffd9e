//! Avro's binary encoding written straight from serde and read straight into it, for
//! the shapes Vigil's own value schemas take: records of primitives, enums and
//! two-branch unions with null.
//!
//! apache-avro's schema-directed serde does the same per field through generic schema
//! lookups: about 7 000 instructions to write an enriched payment and 2 700 to read a
//! record, a fifth of a Kafka service's loop. A shape compiled once from the schema
//! leaves only the bytes to write or read.
//!
//! A schema with anything else (other unions, arrays, maps, fixed, logical types) has
//! no shape, and a value that does not fit one is refused: the caller then goes
//! apache-avro's way, which also names what is wrong.

use std::fmt::{self, Display};

use apache_avro::Schema;
use serde::de::value::{BorrowedStrDeserializer, StrDeserializer};
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};
use serde::ser::{self, Impossible, Serialize, SerializeStruct};
use serde::{forward_to_deserialize_any, Deserialize};

/// A schema, as far as the binary encoding needs it.
#[derive(Debug, PartialEq)]
pub enum Shape {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    Enum(Vec<String>),
    Record(Vec<Field>),
    /// A union of null and one other branch; `null_index` is null's place in it.
    Nullable {
        present: Box<Shape>,
        null_index: u8,
    },
}

#[derive(Debug, PartialEq)]
pub struct Field {
    name: String,
    shape: Shape,
}

impl Shape {
    /// The shape of `schema`, if it is one this module reads and writes.
    pub fn of(schema: &Schema) -> Option<Shape> {
        Some(match schema {
            Schema::Null => Shape::Null,
            Schema::Boolean => Shape::Boolean,
            Schema::Int => Shape::Int,
            Schema::Long => Shape::Long,
            Schema::Float => Shape::Float,
            Schema::Double => Shape::Double,
            Schema::Bytes => Shape::Bytes,
            Schema::String => Shape::String,
            Schema::Enum(e) => Shape::Enum(e.symbols.clone()),
            Schema::Record(r) => Shape::Record(
                r.fields
                    .iter()
                    .map(|f| Some(Field { name: f.name.clone(), shape: Shape::of(&f.schema)? }))
                    .collect::<Option<_>>()?,
            ),
            Schema::Union(u) => match u.variants() {
                [Schema::Null, other] => Shape::Nullable { present: Box::new(Shape::of(other)?), null_index: 0 },
                [other, Schema::Null] => Shape::Nullable { present: Box::new(Shape::of(other)?), null_index: 1 },
                _ => return None,
            },
            _ => return None,
        })
    }
}

/// Why a value was not written or read here (the generic way then says it better).
#[derive(Debug)]
pub struct Refused(String);

impl Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

impl ser::Error for Refused {
    fn custom<T: Display>(msg: T) -> Self {
        Refused(msg.to_string())
    }
}

impl de::Error for Refused {
    fn custom<T: Display>(msg: T) -> Self {
        Refused(msg.to_string())
    }
}

fn refuse<T>(shape: &Shape, what: &str) -> Result<T, Refused> {
    Err(Refused(format!("{what} does not fit {shape:?}")))
}

/// Appends `value`'s datum to `out`. When refused, `out` may hold part of it.
pub fn write<T: Serialize + ?Sized>(shape: &Shape, value: &T, out: &mut Vec<u8>) -> Result<(), Refused> {
    value.serialize(Writer { shape, out })
}

/// Reads a value from the datum at the start of `datum` (bytes after it are ignored,
/// as apache-avro's reader ignores them).
pub fn read<'de, T: Deserialize<'de>>(shape: &Shape, datum: &'de [u8]) -> Result<T, Refused> {
    T::deserialize(Reader { shape, input: &mut &datum[..] })
}

/// A long as Avro writes it: zig-zag, then seven bits a byte, low bits first.
fn write_long(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push(z as u8 | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn write_length_prefixed(out: &mut Vec<u8>, bytes: &[u8]) {
    write_long(out, bytes.len() as i64);
    out.extend_from_slice(bytes);
}

fn symbol_index(symbols: &[String], symbol: &str) -> Option<i64> {
    symbols.iter().position(|s| s == symbol).map(|i| i as i64)
}

struct Writer<'a> {
    shape: &'a Shape,
    out: &'a mut Vec<u8>,
}

impl<'a> Writer<'a> {
    /// The shape a present value takes: in a nullable, the other branch, whose index
    /// is written first.
    fn present(self) -> (&'a Shape, &'a mut Vec<u8>) {
        match self.shape {
            Shape::Nullable { present, null_index } => {
                write_long(self.out, i64::from(1 - null_index));
                (present, self.out)
            }
            shape => (shape, self.out),
        }
    }

    fn integer(self, v: i64) -> Result<(), Refused> {
        match self.present() {
            (Shape::Long, out) => write_long(out, v),
            (Shape::Int, out) => match i32::try_from(v) {
                Ok(v) => write_long(out, i64::from(v)),
                Err(_) => return refuse(&Shape::Int, "an integer beyond 32 bits"),
            },
            (shape, _) => return refuse(shape, "an integer"),
        }
        Ok(())
    }

    fn text(self, v: &str) -> Result<(), Refused> {
        match self.present() {
            (Shape::String, out) => write_length_prefixed(out, v.as_bytes()),
            (Shape::Enum(symbols), out) => match symbol_index(symbols, v) {
                Some(i) => write_long(out, i),
                None => return Err(Refused(format!("`{v}` is not a symbol of {symbols:?}"))),
            },
            (shape, _) => return refuse(shape, "a string"),
        }
        Ok(())
    }
}

impl<'a> ser::Serializer for Writer<'a> {
    type Ok = ();
    type Error = Refused;
    type SerializeSeq = Impossible<(), Refused>;
    type SerializeTuple = Impossible<(), Refused>;
    type SerializeTupleStruct = Impossible<(), Refused>;
    type SerializeTupleVariant = Impossible<(), Refused>;
    type SerializeMap = Impossible<(), Refused>;
    type SerializeStruct = RecordWriter<'a>;
    type SerializeStructVariant = Impossible<(), Refused>;

    fn serialize_bool(self, v: bool) -> Result<(), Refused> {
        match self.present() {
            (Shape::Boolean, out) => out.push(u8::from(v)),
            (shape, _) => return refuse(shape, "a boolean"),
        }
        Ok(())
    }

    fn serialize_i8(self, v: i8) -> Result<(), Refused> {
        self.integer(v.into())
    }

    fn serialize_i16(self, v: i16) -> Result<(), Refused> {
        self.integer(v.into())
    }

    fn serialize_i32(self, v: i32) -> Result<(), Refused> {
        self.integer(v.into())
    }

    fn serialize_i64(self, v: i64) -> Result<(), Refused> {
        self.integer(v)
    }

    fn serialize_u8(self, v: u8) -> Result<(), Refused> {
        self.integer(v.into())
    }

    fn serialize_u16(self, v: u16) -> Result<(), Refused> {
        self.integer(v.into())
    }

    fn serialize_u32(self, v: u32) -> Result<(), Refused> {
        self.integer(v.into())
    }

    fn serialize_u64(self, v: u64) -> Result<(), Refused> {
        match i64::try_from(v) {
            Ok(v) => self.integer(v),
            Err(_) => refuse(self.shape, "an integer beyond 63 bits"),
        }
    }

    fn serialize_f32(self, v: f32) -> Result<(), Refused> {
        match self.present() {
            (Shape::Float, out) => out.extend_from_slice(&v.to_le_bytes()),
            (shape, _) => return refuse(shape, "a float"),
        }
        Ok(())
    }

    fn serialize_f64(self, v: f64) -> Result<(), Refused> {
        match self.present() {
            (Shape::Double, out) => out.extend_from_slice(&v.to_le_bytes()),
            (shape, _) => return refuse(shape, "a double"),
        }
        Ok(())
    }

    fn serialize_char(self, _: char) -> Result<(), Refused> {
        refuse(self.shape, "a char")
    }

    fn serialize_str(self, v: &str) -> Result<(), Refused> {
        self.text(v)
    }

    fn serialize_bytes(self, v: &[u8]) -> Result<(), Refused> {
        match self.present() {
            (Shape::Bytes, out) => write_length_prefixed(out, v),
            (shape, _) => return refuse(shape, "bytes"),
        }
        Ok(())
    }

    fn serialize_none(self) -> Result<(), Refused> {
        match self.shape {
            Shape::Nullable { null_index, .. } => write_long(self.out, i64::from(*null_index)),
            Shape::Null => {}
            shape => return refuse(shape, "no value"),
        }
        Ok(())
    }

    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<(), Refused> {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<(), Refused> {
        self.serialize_none()
    }

    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Refused> {
        self.serialize_none()
    }

    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<(), Refused> {
        self.text(variant)
    }

    fn serialize_newtype_struct<T: ?Sized + Serialize>(self, _: &'static str, value: &T) -> Result<(), Refused> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), Refused> {
        refuse(self.shape, "an enum variant with a value")
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Refused> {
        refuse(self.shape, "a sequence")
    }

    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Refused> {
        refuse(self.shape, "a tuple")
    }

    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeTupleStruct, Refused> {
        refuse(self.shape, "a tuple struct")
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Refused> {
        refuse(self.shape, "a tuple variant")
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Refused> {
        refuse(self.shape, "a map")
    }

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<RecordWriter<'a>, Refused> {
        match self.present() {
            (Shape::Record(fields), out) => Ok(RecordWriter { fields, next: 0, out }),
            (shape, _) => refuse(shape, "a struct"),
        }
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Refused> {
        refuse(self.shape, "a struct variant")
    }
}

/// Writes a struct's fields, which must come in the schema's order, every one of them
/// (a skipped field would need its default, which the generic way writes).
struct RecordWriter<'a> {
    fields: &'a [Field],
    next: usize,
    out: &'a mut Vec<u8>,
}

impl SerializeStruct for RecordWriter<'_> {
    type Ok = ();
    type Error = Refused;

    fn serialize_field<T: ?Sized + Serialize>(&mut self, name: &'static str, value: &T) -> Result<(), Refused> {
        match self.fields.get(self.next) {
            Some(field) if field.name == name => {
                self.next += 1;
                value.serialize(Writer { shape: &field.shape, out: self.out })
            }
            _ => Err(Refused(format!("field `{name}` is not the schema's next field"))),
        }
    }

    fn skip_field(&mut self, name: &'static str) -> Result<(), Refused> {
        Err(Refused(format!("field `{name}` skipped")))
    }

    fn end(self) -> Result<(), Refused> {
        match self.fields.get(self.next) {
            None => Ok(()),
            Some(field) => Err(Refused(format!("field `{}` missing", field.name))),
        }
    }
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
    use std::fmt::Debug;

    use apache_avro::reader::datum::GenericDatumReader;
    use apache_avro::writer::datum::GenericDatumWriter;
    use serde::de::DeserializeOwned;
    use vigil_datagen::rng::Draw;
    use vigil_datagen::traffic::Traffic;
    use vigil_model::output::{DeviceMetrics, EnrichedPayment, LateDeviceEvent, LatePayment, RecordType};
    use vigil_model::{EventType, Millis};

    use super::*;
    use vigil_model::topology::{
        Topic, DEVICE_EVENTS, DEVICE_EVENTS_LATE, DEVICE_EVENTS_ONTIME, DEVICE_METRICS, ENRICHED_PAYMENTS,
        ENRICHED_PAYMENTS_LATE, ORDERS, PAYMENTS,
    };
    use vigil_operators::SeedPipeline;
    use vigil_stream::Pipeline;

    fn schema(topic: &'static Topic) -> Schema {
        Schema::parse_str(topic.schema).unwrap()
    }

    fn shape(topic: &'static Topic) -> Shape {
        Shape::of(&schema(topic)).unwrap_or_else(|| panic!("{} has no shape", topic.name))
    }

    /// A topic's schema, parsed once, and its shape.
    struct Both {
        topic: &'static Topic,
        schema: Schema,
        shape: Shape,
    }

    impl Both {
        fn of(topic: &'static Topic) -> Both {
            Both { topic, schema: schema(topic), shape: shape(topic) }
        }

        fn theirs<T: Serialize>(&self, value: &T) -> Vec<u8> {
            GenericDatumWriter::builder(&self.schema).build().unwrap().write_ser_to_vec(value).unwrap()
        }

        /// Written here, `value` has apache-avro's bytes, and reads back the same here
        /// and there; cut anywhere short, it is refused.
        fn agree<T: Serialize + DeserializeOwned + PartialEq + Debug>(&self, value: &T) -> Vec<u8> {
            let mut ours = Vec::new();
            write(&self.shape, value, &mut ours).unwrap();
            assert_eq!(ours, self.theirs(value), "{} {value:?}", self.topic.name);
            let reader = GenericDatumReader::builder(&self.schema).build().unwrap();
            assert_eq!(reader.read_deser::<T>(&mut &ours[..]).unwrap(), *value);
            assert_eq!(read::<T>(&self.shape, &ours).unwrap(), *value, "{}", self.topic.name);
            for end in 0..ours.len() {
                assert!(read::<T>(&self.shape, &ours[..end]).is_err(), "{} cut at {end}", self.topic.name);
            }
            ours
        }
    }

    /// Text that is not always short ASCII: empty, multi-byte, longer than 63 bytes
    /// (a two-byte length).
    fn text(draw: &Draw, i: u64, purpose: u64, plain: &str) -> vigil_model::input::Text {
        match draw.range(i, purpose, 0, 5) {
            0 => "".into(),
            1 => format!("{plain}-Zürich-東京-🦀").into(),
            2 => plain.repeat(12).into(),
            _ => plain.into(),
        }
    }

    fn number(draw: &Draw, i: u64, purpose: u64, usual: f64) -> f64 {
        [usual, -0.0, f64::MAX, f64::MIN_POSITIVE, f64::INFINITY, 1e-300][draw.range(i, purpose, 0, 9).min(5) as usize]
    }

    fn millis(draw: &Draw, i: u64, purpose: u64, usual: Millis) -> Millis {
        [usual, 0, -1, Millis::MIN, Millis::MAX, 63, 64, -65][draw.range(i, purpose, 0, 11).min(7) as usize]
    }

    #[test]
    fn the_per_event_topics_have_shapes_and_unions_of_records_do_not() {
        for topic in SeedPipeline::default().topology().topics() {
            let top_level_union = matches!(schema(topic), Schema::Union(_));
            assert_eq!(Shape::of(&schema(topic)).is_none(), top_level_union, "{}", topic.name);
        }
        for topic in
            [&ORDERS, &PAYMENTS, &DEVICE_EVENTS, &DEVICE_EVENTS_ONTIME, &DEVICE_EVENTS_LATE, &ENRICHED_PAYMENTS]
        {
            shape(topic);
        }
    }

    #[test]
    fn writes_the_bytes_apache_avro_writes_and_reads_them_back() {
        let traffic = Traffic::new(7, 1_700_000_000_000, 0);
        let draw = Draw::new(11);
        let event_types = [EventType::Heartbeat, EventType::Fault, EventType::Reboot, EventType::FirmwareUpdate];
        let [orders, payments, devices, on_time, late_devices, enriched_payments, late_payments] = [
            &ORDERS,
            &PAYMENTS,
            &DEVICE_EVENTS,
            &DEVICE_EVENTS_ONTIME,
            &DEVICE_EVENTS_LATE,
            &ENRICHED_PAYMENTS,
            &ENRICHED_PAYMENTS_LATE,
        ]
        .map(Both::of);
        for i in 0..300 {
            let (Some(mut order), Some(mut payment)) = (traffic.order(i), traffic.payment(i)) else { continue };
            order.customer_id = text(&draw, i, 1, &order.customer_id);
            order.order_amount = number(&draw, i, 2, order.order_amount);
            order.order_ts = millis(&draw, i, 3, order.order_ts);
            orders.agree(&order);
            payment.method = text(&draw, i, 4, &payment.method);
            payment.paid_amount = number(&draw, i, 5, payment.paid_amount);
            payment.payment_ts = millis(&draw, i, 6, payment.payment_ts);
            payments.agree(&payment);

            let mut device = traffic.device(i);
            device.site_id = text(&draw, i, 7, &device.site_id);
            device.event_type = event_types[draw.range(i, 8, 0, 3) as usize];
            device.event_ts = millis(&draw, i, 9, device.event_ts);
            devices.agree(&device);
            on_time.agree(&device);
            let watermark = device.event_ts.saturating_add(draw.range(i, 10, 0, 1 << 40));
            late_devices.agree(&LateDeviceEvent::new(device, watermark));

            let matched = draw.range(i, 11, 0, 1) == 1;
            let enriched = EnrichedPayment {
                record_type: RecordType::EnrichedPayment,
                payment_id: payment.payment_id,
                order_id: payment.order_id,
                paid_amount: payment.paid_amount,
                method: payment.method,
                payment_ts_ms: payment.payment_ts,
                unmatched: !matched,
                customer_id: matched.then_some(order.customer_id),
                order_amount: matched.then_some(order.order_amount),
                country: matched.then(|| text(&draw, i, 12, &order.country)),
                amount_mismatch: draw.range(i, 13, 0, 1) == 1,
            };
            let bytes = enriched_payments.agree(&enriched);
            // The late side output carries two more longs after the same fields.
            let late =
                LatePayment { payment: enriched.into(), watermark_ms: millis(&draw, i, 14, 5), lag_ms: i as Millis };
            let mut ours = Vec::new();
            write(&late_payments.shape, &late, &mut ours).unwrap();
            assert_eq!(ours, late_payments.theirs(&late));
            assert_eq!(ours[..bytes.len()], bytes);
        }
    }

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

    #[test]
    fn refuses_what_it_cannot_write_exactly() {
        let metrics = DeviceMetrics {
            record_type: RecordType::DeviceMetrics,
            site_id: "site-a".into(),
            window_start: 0,
            window_end: 60_000,
            event_count: 3,
            fault_count: 1,
            reboot_count: 0,
            firmware_failures: 0,
            fault_rate: 1.0 / 3.0,
            revision: 1,
        };
        // Revision 1 is skipped (its default is the schema's to write).
        assert!(write(&shape(&DEVICE_METRICS), &metrics, &mut Vec::new()).is_err());
        let revised = DeviceMetrics { revision: 2, ..metrics };
        let mut ours = Vec::new();
        write(&shape(&DEVICE_METRICS), &revised, &mut ours).unwrap();
        assert_eq!(ours, Both::of(&DEVICE_METRICS).theirs(&revised));
        // Fields in another order than the schema's, or a value of another type.
        let order = traffic_order();
        assert!(write(&shape(&PAYMENTS), &order, &mut Vec::new()).is_err());
        assert!(write(&shape(&ORDERS), &(1, 2), &mut Vec::new()).is_err());
        assert!(write(&shape(&ORDERS), "order-1", &mut Vec::new()).is_err());
    }

    fn traffic_order() -> vigil_model::Order {
        Traffic::new(1, 1_700_000_000_000, 0).order(0).unwrap()
    }
}
