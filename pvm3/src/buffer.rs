//! PVM message buffers: what `pvm_pk*` appends and `pvm_upk*` takes, in
//! either encoding. Pure: no I/O, no global state.
//!
//! `PvmDataDefault` is XDR (RFC 4506): big-endian, every item at least four
//! bytes (a short travels as a 32-bit int, a long as a 64-bit hyper), so a
//! message reads the same on any architecture. `PvmDataRaw` (and
//! `PvmDataInPlace`, copied at pack time) is the sender's own layout.
//! Bytes go as they are in both. A string is its length with the NUL, then
//! its bytes and the NUL. On the wire a message is one byte naming its
//! encoding, its context (a big-endian 32-bit int), then the packed items.
//!
//! What does not live here: the table of buffers and which is active
//! (`state`), the C functions (`pack`).

/// How items are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// XDR (`PvmDataDefault`).
    Xdr,
    /// The machine's own layout (`PvmDataRaw`, `PvmDataInPlace`).
    Raw,
}

impl Encoding {
    /// From `pvm_initsend`'s argument.
    pub fn from_pvm(code: i32) -> Option<Encoding> {
        match code {
            0 => Some(Encoding::Xdr),
            1 | 2 => Some(Encoding::Raw),
            _ => None,
        }
    }

    /// The PVM code (`pvm_bufinfo`'s encoding, the wire's first byte).
    pub fn code(self) -> u8 {
        match self {
            Encoding::Xdr => 0,
            Encoding::Raw => 1,
        }
    }
}

/// An item type PVM packs.
pub trait Item: Copy {
    /// Append `self` in `enc`.
    fn put(self, enc: Encoding, out: &mut Vec<u8>);
    /// Read one from the front of `b`, with the bytes it took.
    fn get(enc: Encoding, b: &[u8]) -> Option<(Self, usize)>;
}

macro_rules! item {
    ($t:ty, $xdr:ty) => {
        impl Item for $t {
            fn put(self, enc: Encoding, out: &mut Vec<u8>) {
                match enc {
                    Encoding::Xdr => out.extend_from_slice(&(self as $xdr).to_be_bytes()),
                    Encoding::Raw => out.extend_from_slice(&self.to_ne_bytes()),
                }
            }
            fn get(enc: Encoding, b: &[u8]) -> Option<(Self, usize)> {
                match enc {
                    Encoding::Xdr => {
                        const N: usize = std::mem::size_of::<$xdr>();
                        let a: [u8; N] = b.get(..N)?.try_into().ok()?;
                        Some((<$xdr>::from_be_bytes(a) as $t, N))
                    }
                    Encoding::Raw => {
                        const N: usize = std::mem::size_of::<$t>();
                        let a: [u8; N] = b.get(..N)?.try_into().ok()?;
                        Some((<$t>::from_ne_bytes(a), N))
                    }
                }
            }
        }
    };
}

item!(i16, i32);
item!(u16, u32);
item!(i32, i32);
item!(u32, u32);
item!(i64, i64);
item!(u64, u64);
item!(f32, f32);
item!(f64, f64);

impl Item for u8 {
    fn put(self, _: Encoding, out: &mut Vec<u8>) {
        out.push(self);
    }
    fn get(_: Encoding, b: &[u8]) -> Option<(Self, usize)> {
        b.first().map(|&x| (x, 1))
    }
}

/// Why an unpack failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Short {
    /// The message holds fewer items than asked for (`PvmNoData`).
    NoData,
    /// A string longer than its buffer could be (`PvmBadMsg`).
    BadMsg,
}

/// A buffer's bytes, the encoding and context first: being packed (owned),
/// or as received (a payload libmig handed over, read in place).
#[derive(Debug, Clone)]
enum Store {
    Own(Vec<u8>),
    Got(libmig::Payload),
}

impl std::ops::Deref for Store {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Store::Own(v) => v,
            Store::Got(p) => p,
        }
    }
}

/// One message buffer.
#[derive(Debug, Clone)]
pub struct Buffer {
    /// Its encoding.
    pub enc: Encoding,
    data: Store,
    pos: usize,
    /// Tag and sender of a received message (0 for one being built).
    pub tag: i32,
    /// The sender's Tid.
    pub src: u64,
    /// The context a received message was sent in.
    pub ctx: i32,
}

/// Bytes before the packed items: encoding and context.
pub const HEAD: usize = 5;

/// The context a message was sent in (`None`: not a PVM message).
pub fn context_of(wire: &[u8]) -> Option<i32> {
    let c: [u8; 4] = wire.get(1..HEAD)?.try_into().ok()?;
    Some(i32::from_be_bytes(c))
}

impl Buffer {
    /// An empty buffer to pack into.
    pub fn new(enc: Encoding) -> Buffer {
        let mut head = vec![0u8; HEAD];
        head[0] = enc.code();
        Buffer {
            enc,
            data: Store::Own(head),
            pos: HEAD,
            tag: 0,
            src: 0,
            ctx: 0,
        }
    }

    /// A received message's bytes, copied (`None`: not a PVM message).
    pub fn received(wire: &[u8], tag: i32, src: u64) -> Option<Buffer> {
        Buffer::received_payload(wire.to_vec().into(), tag, src)
    }

    /// A received message, its bytes read where they are (`None`: not a
    /// PVM message).
    pub fn received_payload(wire: libmig::Payload, tag: i32, src: u64) -> Option<Buffer> {
        let enc = match wire.first()? {
            0 => Encoding::Xdr,
            1 => Encoding::Raw,
            _ => return None,
        };
        let ctx = context_of(&wire)?;
        Some(Buffer {
            enc,
            data: Store::Got(wire),
            pos: HEAD,
            tag,
            src,
            ctx,
        })
    }

    /// The bytes packed so far, to write to.
    fn own(&mut self) -> &mut Vec<u8> {
        if let Store::Got(p) = &self.data {
            self.data = Store::Own(p.to_vec());
        }
        match &mut self.data {
            Store::Own(v) => v,
            Store::Got(_) => unreachable!("made owned above"),
        }
    }

    /// The bytes to send, in context `ctx` (no copy unless a received
    /// buffer is sent on in another context).
    pub fn wire(&mut self, ctx: i32) -> &[u8] {
        if context_of(&self.data) != Some(ctx) {
            self.own()[1..HEAD].copy_from_slice(&ctx.to_be_bytes());
        }
        &self.data
    }

    /// Packed bytes (what `pvm_bufinfo` reports).
    pub fn len(&self) -> usize {
        self.data.len() - HEAD
    }

    /// Nothing packed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Append items.
    pub fn pack<T: Item>(&mut self, items: impl IntoIterator<Item = T>) {
        let enc = self.enc;
        let out = self.own();
        for x in items {
            x.put(enc, out);
        }
    }

    /// Append items already laid out as `Raw` lays them out (this
    /// machine's own layout, one after another): one copy.
    pub fn pack_native(&mut self, bytes: &[u8]) {
        debug_assert_eq!(self.enc, Encoding::Raw);
        self.own().extend_from_slice(bytes);
    }

    /// Take `len` bytes of items laid out as `Raw` lays them out; nothing
    /// is taken when there are fewer.
    pub fn unpack_native(&mut self, len: usize) -> Result<&[u8], Short> {
        let s = self
            .data
            .get(self.pos..self.pos + len)
            .ok_or(Short::NoData)?;
        self.pos += len;
        Ok(s)
    }

    /// Append a string (without its NUL; the NUL is packed for it).
    pub fn pack_str(&mut self, s: &[u8]) {
        let n = s.len() as i32 + 1;
        let enc = self.enc;
        let out = self.own();
        n.put(enc, out);
        out.extend_from_slice(s);
        out.push(0);
    }

    /// Take `n` items; nothing is taken when there are fewer.
    pub fn unpack<T: Item>(&mut self, n: usize) -> Result<Vec<T>, Short> {
        let mut at = self.pos;
        let mut out = Vec::with_capacity(n.min(1 << 20));
        for _ in 0..n {
            let (x, k) = T::get(self.enc, &self.data[at..]).ok_or(Short::NoData)?;
            out.push(x);
            at += k;
        }
        self.pos = at;
        Ok(out)
    }

    /// Take a string, its NUL included.
    pub fn unpack_str(&mut self) -> Result<Vec<u8>, Short> {
        let (n, k) = i32::get(self.enc, &self.data[self.pos..]).ok_or(Short::NoData)?;
        let n = usize::try_from(n).map_err(|_| Short::BadMsg)?;
        let start = self.pos + k;
        let s = self.data.get(start..start + n).ok_or(Short::NoData)?;
        if n == 0 || s[n - 1] != 0 {
            return Err(Short::BadMsg);
        }
        let s = s.to_vec();
        self.pos = start + n;
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn xdr_is_big_endian_and_at_least_four_bytes_an_item() {
        let mut b = Buffer::new(Encoding::Xdr);
        b.pack([0x0102_0304i32]);
        b.pack([-2i16]);
        b.pack([1.0f32]);
        b.pack([7u8]);
        let w = b.wire(0).to_vec();
        assert_eq!(w[0], 0, "the encoding byte");
        assert_eq!(context_of(&w), Some(0));
        let w = &w[HEAD..];
        assert_eq!(&w[0..4], &[1, 2, 3, 4]);
        assert_eq!(&w[4..8], &[0xff, 0xff, 0xff, 0xfe], "a short as an XDR int");
        assert_eq!(&w[8..12], &1.0f32.to_be_bytes());
        assert_eq!(w[12], 7);
    }

    #[test]
    fn too_few_items_take_nothing_and_a_bad_string_is_refused() {
        let mut b = Buffer::new(Encoding::Xdr);
        b.pack([1i32, 2]);
        let mut r = Buffer::received(b.wire(0), 5, 9).expect("ours");
        assert_eq!(r.unpack::<i32>(3), Err(Short::NoData));
        assert_eq!(r.unpack::<i32>(2), Ok(vec![1, 2]));
        // A string whose length runs past the message.
        let mut b = Buffer::new(Encoding::Xdr);
        b.pack([1000i32]);
        b.pack(*b"abc");
        let mut r = Buffer::received(b.wire(0), 0, 0).expect("ours");
        assert_eq!(r.unpack_str(), Err(Short::NoData));
        // One with no NUL where its length says.
        let mut b = Buffer::new(Encoding::Raw);
        b.pack([3i32]);
        b.pack(*b"abc");
        let mut r = Buffer::received(b.wire(0), 0, 0).expect("ours");
        assert_eq!(r.unpack_str(), Err(Short::BadMsg));
        assert!(
            Buffer::received(&[9, 0, 0, 0, 0, 2], 0, 0).is_none(),
            "not ours"
        );
        assert!(Buffer::received(&[0, 0, 0], 0, 0).is_none(), "cut short");
        assert!(Buffer::received(&[], 0, 0).is_none());
    }

    fn round_trip<T: Item + PartialEq + std::fmt::Debug>(enc: Encoding, xs: &[T]) {
        let mut b = Buffer::new(enc);
        b.pack(xs.iter().copied());
        let mut r = Buffer::received(b.wire(0), 1, 2).expect("ours");
        assert_eq!(r.unpack::<T>(xs.len()).expect("all there"), xs);
        assert_eq!(
            r.unpack::<T>(1).map(|_| ()),
            Err(Short::NoData),
            "nothing past the end"
        );
    }

    proptest! {
        #[test]
        fn every_type_round_trips_in_both_encodings(
            i16s in proptest::collection::vec(any::<i16>(), 0..20),
            u16s in proptest::collection::vec(any::<u16>(), 0..20),
            i32s in proptest::collection::vec(any::<i32>(), 0..20),
            u32s in proptest::collection::vec(any::<u32>(), 0..20),
            i64s in proptest::collection::vec(any::<i64>(), 0..20),
            u64s in proptest::collection::vec(any::<u64>(), 0..20),
            f32s in proptest::collection::vec(any::<f32>().prop_filter("nan", |x| !x.is_nan()), 0..20),
            f64s in proptest::collection::vec(any::<f64>().prop_filter("nan", |x| !x.is_nan()), 0..20),
            bytes in proptest::collection::vec(any::<u8>(), 0..50),
            s in proptest::collection::vec(1u8..=255, 0..40),
        ) {
            for enc in [Encoding::Xdr, Encoding::Raw] {
                round_trip(enc, &i16s);
                round_trip(enc, &u16s);
                round_trip(enc, &i32s);
                round_trip(enc, &u32s);
                round_trip(enc, &i64s);
                round_trip(enc, &u64s);
                round_trip(enc, &f32s);
                round_trip(enc, &f64s);
                round_trip(enc, &bytes);
                // Mixed, in order, strings among them.
                let mut b = Buffer::new(enc);
                b.pack(i32s.iter().copied());
                b.pack_str(&s);
                b.pack(f64s.iter().copied());
                let mut r = Buffer::received(b.wire(0), 0, 0).expect("ours");
                prop_assert_eq!(r.unpack::<i32>(i32s.len()).expect("ints"), i32s.clone());
                let mut want = s.clone();
                want.push(0);
                prop_assert_eq!(r.unpack_str().expect("string"), want);
                prop_assert_eq!(r.unpack::<f64>(f64s.len()).expect("doubles"), f64s.clone());
            }
        }

        #[test]
        fn raw_items_packed_as_memory_read_as_items(xs in proptest::collection::vec(any::<i32>(), 0..50)) {
            let mut b = Buffer::new(Encoding::Raw);
            let bytes: Vec<u8> = xs.iter().flat_map(|x| x.to_ne_bytes()).collect();
            b.pack_native(&bytes);
            let mut r = Buffer::received(b.wire(0), 0, 0).expect("ours");
            prop_assert_eq!(r.unpack::<i32>(xs.len()).expect("all"), xs.clone());
            let mut r = Buffer::received(b.wire(0), 0, 0).expect("ours");
            prop_assert_eq!(r.unpack_native(bytes.len()).expect("all"), &bytes[..]);
        }

        #[test]
        fn arbitrary_bytes_never_panic_an_unpack(wire in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Some(mut r) = Buffer::received(&wire, 0, 0) {
                let _ = r.unpack_str();
                let _ = r.unpack::<i64>(3);
                let _ = r.unpack::<i16>(100);
                let _ = r.unpack::<f64>(1);
            }
        }
    }
}
