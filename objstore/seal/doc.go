// Package seal is client-side envelope encryption of a bucket: a
// Driver that seals every object tierlog writes with AES-256-GCM before
// it leaves the process, and opens it again on the way back, ranged reads
// included.
//
//	store := objstore.New(seal.New(driver, ring, seal.Options{}), name, opts)
//
// or, through a store URL, `?key-file=/etc/tierlog/keys` (storeurl).
//
// # Keys
//
// Three levels, each wrapping the next:
//
//   - key-encryption keys (KEKs) live in a KeyRing: a local key file
//     (LoadKeyFile) or an implementation a broker backs with a KMS. One is
//     active; the others open what they wrapped before.
//   - bucket keys: 32 random bytes, one per Driver (created at its first
//     write), stored wrapped by the active KEK in small objects of their
//     own, KeyDir + hex(id) in the folder above the partition folders it
//     writes to (KeyFolder: tierlog/_tierlog/keys/ for tierlog/orders-0/*).
//     They never leave the process unwrapped.
//   - object keys: each object's own AES-256 key, derived with HKDF-SHA256
//     from the bucket key, a 16-byte random salt chosen for that write, and
//     the object's bound name (BoundName: its partition folder and name).
//     No two objects (nor two writes of one key) share a key, and no key
//     travels in an object.
//
// Rotating a KEK (Rekey, `tierctl rekey`) re-wraps the bucket keys under
// the active KEK: a request or two per bucket key, whatever the bucket
// holds, and no data re-uploaded. Afterwards no object in the bucket is
// wrapped under the retired KEK, and the ring may drop it.
//
// # Format (version 1, frozen)
//
// A sealed object is a header and its chunks:
//
//	header, 80 bytes:
//	 0  magic      ff 'T' 'L' 'S' 'E' 'A' 'L' 01   (version 1)
//	 8  chunk size uint32 BE   plaintext bytes a chunk, 4 KiB to 64 MiB
//	12  zero       4 bytes
//	16  size       uint64 BE   plaintext bytes of the object
//	24  key id     16 bytes    the bucket key's id
//	40  salt       16 bytes
//	56  zero       8 bytes
//	64  tag        16 bytes    GCM tag of an empty message, nonce ff x12,
//	                           associated data: bytes 0..64 and the name
//	chunk i (i = 0 .. n-1, n = max(1, ceil(size / chunk size))):
//	    ciphertext of plaintext bytes [i*chunk, min(size, (i+1)*chunk))
//	    and its 16-byte GCM tag; nonce: 4 zero bytes, uint64 BE i;
//	    associated data: 'c', uint64 BE i, 1 if i = n-1 else 0, the name
//
// The name is the object's bound name (BoundName: the last two components
// of its key, its partition's folder and its own name), the same whether
// the store's URL is rooted at the bucket or at the Backend's prefix. A
// chunk moved to another position or another object, a header swapped, an
// object cut at a chunk boundary (the last chunk says it is last), renamed
// or moved to another partition fails to open, with an error naming the
// object and the chunk. The first byte, 0xff, is one no plaintext object of
// tierlog's starts with (a segment's base offset, an index entry, a
// manifest, a WAL object, a checkpoint's text).
//
// A read of plaintext bytes [a, b) GETs chunks a/chunk .. (b-1)/chunk and
// nothing else once the object's header is known: the header of each
// object read is kept (Options.Headers of them), checked against the ETag
// of every later GET. A read of an object whose header is not kept is
// still one round trip: from offset 0 one GET, the header at its front;
// elsewhere the header's GET and the chunks' at once. So the remote
// offset index still finds a batch and a read fetches a chunk or two
// around it; what this Driver opens lives only in memory (its user may
// keep it: tiered keeps fetched offset and time indexes on the broker's
// disk).
//
// # What sealing does not do
//
// Names bind a partition's folder and the object's name, not the folders
// above: objects copied with their bucket keys under another prefix or
// into another bucket, read with the same key file, open (which is what
// moving a bucket needs). A store rooted inside a partition's folder
// sees names without it and opens nothing. And a key
// rewritten in place (a manifest) rolled back to an older version of
// itself opens: sealing says an object is one tierlog wrote under that
// name, not that it is the newest; tierlog's rollback guard (a
// partition's tier-state-checkpoint) is what refuses a manifest older
// than one it saw.
//
// # What is not sealed
//
// The bucket keys' objects (wrapped by a KEK already), and the objects'
// names (topics, partitions, offsets) are plain. List's sizes are
// the plaintext sizes computed from the stored sizes with the chunk size
// of this Driver's Options; an object sealed with another chunk size
// lists a size a few bytes off (Head and Get are exact).
package seal
