//! The gRPC codec of every Lakelog service: prost, with an encoder that sizes its buffer for
//! the whole message first. (tonic-prost's grows it while encoding, so a 4 MiB read response
//! is copied again at every doubling.)

use std::marker::PhantomData;

use prost::Message;
use tonic::Status;
use tonic::codec::{EncodeBuf, Encoder};
use tonic_prost::ProstDecoder;

/// `application/grpc+proto` via prost; encodes into a buffer reserved up front.
#[derive(Debug, Clone)]
pub struct Codec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for Codec<T, U> {
    fn default() -> Self {
        Codec(PhantomData)
    }
}

impl<T, U> tonic::codec::Codec for Codec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = SizedEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        SizedEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::default()
    }
}

/// Encodes a message after reserving its encoded length.
#[derive(Debug, Clone)]
pub struct SizedEncoder<T>(PhantomData<T>);

impl<T: Message> Encoder for SizedEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.reserve(item.encoded_len());
        item.encode(buf).map_err(|e| Status::internal(format!("encoding a response: {e}")))
    }
}
