// The one place @peculiar/x509 is set up. The library resolves its algorithm providers through
// tsyringe, which needs reflect-metadata loaded first, and it signs through WebCrypto, which we
// point at Node's built-in implementation so no openssl binary or polyfill is involved.
import "reflect-metadata";
import * as x509 from "@peculiar/x509";

x509.cryptoProvider.set(globalThis.crypto);

export { x509 };
