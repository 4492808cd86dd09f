package blocklistd.test.yarn;

import java.io.OutputStream;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyPair;
import java.security.KeyPairGenerator;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.SecureRandom;
import java.security.cert.Certificate;
import java.security.cert.X509Certificate;
import java.security.spec.ECGenParameterSpec;
import java.time.Duration;
import java.time.Instant;
import java.util.Base64;
import java.util.Date;
import org.apache.hadoop.conf.Configuration;
import org.bouncycastle.asn1.x500.X500Name;
import org.bouncycastle.asn1.x509.BasicConstraints;
import org.bouncycastle.asn1.x509.ExtendedKeyUsage;
import org.bouncycastle.asn1.x509.Extension;
import org.bouncycastle.asn1.x509.GeneralName;
import org.bouncycastle.asn1.x509.GeneralNames;
import org.bouncycastle.asn1.x509.KeyPurposeId;
import org.bouncycastle.asn1.x509.KeyUsage;
import org.bouncycastle.cert.X509v3CertificateBuilder;
import org.bouncycastle.cert.jcajce.JcaX509CertificateConverter;
import org.bouncycastle.cert.jcajce.JcaX509ExtensionUtils;
import org.bouncycastle.cert.jcajce.JcaX509v3CertificateBuilder;
import org.bouncycastle.operator.jcajce.JcaContentSignerBuilder;

/**
 * The certificates of {@code --https}, made afresh at each start under a directory of DIR: a CA
 * of this run ({@code ca.pem}, what a client trusts) and the ResourceManager's certificate, signed
 * by it, naming 127.0.0.1 (an IP SAN: clients match an IP URL against those, not the CN) and
 * localhost, kept with its key in {@code server.p12}; {@code truststore.p12} holds the CA.
 *
 * <p>A CA and a leaf rather than one self-signed certificate: that shape every TLS client takes
 * (a lone certificate would have to be both the server's and a trust anchor, and rustls, for one,
 * refuses a server certificate that is also a CA), and it is what clients meet in production. EC
 * P-256 keys: generated in milliseconds, where RSA keeps a busy core for a while. The certificates come from bouncycastle, which Hadoop's web proxy already
 * brings (bcpkix): no keytool processes, and nothing added to the dependencies.
 */
final class Tls {
    /** PKCS12 wants a password; these stores hold a throwaway key of a test cluster. */
    private static final String PASSWORD = "yarn-cluster";

    private static final String SIGNATURE = "SHA256withECDSA";

    private final Path keyStore;
    private final Path trustStore;
    private final Path caPem;

    private Tls(Path keyStore, Path trustStore, Path caPem) {
        this.keyStore = keyStore;
        this.trustStore = trustStore;
        this.caPem = caPem;
    }

    /** Makes the CA and the server's certificate, and writes them under {@code dir}. */
    static Tls make(Path dir) throws Exception {
        Files.createDirectories(dir);
        KeyPairGenerator generator = KeyPairGenerator.getInstance("EC");
        generator.initialize(new ECGenParameterSpec("secp256r1"));
        KeyPair caKeys = generator.generateKeyPair();
        KeyPair serverKeys = generator.generateKeyPair();
        // An hour back, for clocks a little behind this one; a year ahead, far beyond any run.
        Instant now = Instant.now();
        Date notBefore = Date.from(now.minus(Duration.ofHours(1)));
        Date notAfter = Date.from(now.plus(Duration.ofDays(365)));
        JcaX509ExtensionUtils extensions = new JcaX509ExtensionUtils();

        X500Name caName = new X500Name("CN=blocklistd test YARN CA");
        X509v3CertificateBuilder ca =
                new JcaX509v3CertificateBuilder(caName, serial(), notBefore, notAfter, caName, caKeys.getPublic());
        // Path length 0: it signs the server's certificate, no other CA.
        ca.addExtension(Extension.basicConstraints, true, new BasicConstraints(0));
        ca.addExtension(Extension.keyUsage, true, new KeyUsage(KeyUsage.keyCertSign | KeyUsage.cRLSign));
        ca.addExtension(Extension.subjectKeyIdentifier, false, extensions.createSubjectKeyIdentifier(caKeys.getPublic()));
        X509Certificate caCert = sign(ca, caKeys.getPrivate());

        X509v3CertificateBuilder server =
                new JcaX509v3CertificateBuilder(
                        caName, serial(), notBefore, notAfter, new X500Name("CN=127.0.0.1"), serverKeys.getPublic());
        server.addExtension(Extension.basicConstraints, true, new BasicConstraints(false));
        // digitalSignature alone: an EC key signs the handshake, it encrypts nothing.
        server.addExtension(Extension.keyUsage, true, new KeyUsage(KeyUsage.digitalSignature));
        server.addExtension(Extension.extendedKeyUsage, false, new ExtendedKeyUsage(KeyPurposeId.id_kp_serverAuth));
        server.addExtension(
                Extension.subjectAlternativeName,
                false,
                new GeneralNames(
                        new GeneralName[] {
                            new GeneralName(GeneralName.iPAddress, "127.0.0.1"),
                            new GeneralName(GeneralName.dNSName, "localhost"),
                        }));
        // Key identifiers both ways: OpenSSL's strict verification (Python's default, say)
        // refuses a chain without them.
        server.addExtension(Extension.subjectKeyIdentifier, false, extensions.createSubjectKeyIdentifier(serverKeys.getPublic()));
        server.addExtension(Extension.authorityKeyIdentifier, false, extensions.createAuthorityKeyIdentifier(caKeys.getPublic()));
        X509Certificate serverCert = sign(server, caKeys.getPrivate());

        KeyStore keys = KeyStore.getInstance("PKCS12");
        keys.load(null, null);
        // The chain with the CA, as servers send it: a client given the CA only can build it.
        keys.setKeyEntry("server", serverKeys.getPrivate(), PASSWORD.toCharArray(), new Certificate[] {serverCert, caCert});
        KeyStore trust = KeyStore.getInstance("PKCS12");
        trust.load(null, null);
        trust.setCertificateEntry("ca", caCert);

        Tls tls = new Tls(dir.resolve("server.p12"), dir.resolve("truststore.p12"), dir.resolve("ca.pem"));
        store(keys, tls.keyStore);
        store(trust, tls.trustStore);
        String pem =
                "-----BEGIN CERTIFICATE-----\n"
                        + Base64.getMimeEncoder(64, new byte[] {'\n'}).encodeToString(caCert.getEncoded())
                        + "\n-----END CERTIFICATE-----\n";
        Files.writeString(tls.caPem, pem, StandardCharsets.US_ASCII);
        return tls;
    }

    /** The PEM file of the CA, for clients to trust. */
    Path caPem() {
        return caPem;
    }

    /**
     * Puts into {@code conf} what ssl-server.xml and ssl-client.xml would hold. Neither file need
     * exist: the web apps read the ssl.server.* keys from the daemon's configuration too (YARN's
     * WebAppUtils.loadSslConfiguration adds it over ssl-server.xml), and Hadoop's SSLFactory
     * falls back to it when no ssl-client.xml is on the classpath, as here. Client side, only the
     * truststore: nobody here presents a client certificate.
     */
    void configure(Configuration conf) {
        conf.set("ssl.server.keystore.location", keyStore.toString());
        conf.set("ssl.server.keystore.type", "pkcs12");
        conf.set("ssl.server.keystore.password", PASSWORD);
        conf.set("ssl.server.keystore.keypassword", PASSWORD);
        conf.set("ssl.server.truststore.location", trustStore.toString());
        conf.set("ssl.server.truststore.type", "pkcs12");
        conf.set("ssl.server.truststore.password", PASSWORD);
        conf.set("ssl.client.truststore.location", trustStore.toString());
        conf.set("ssl.client.truststore.type", "pkcs12");
        conf.set("ssl.client.truststore.password", PASSWORD);
    }

    private static X509Certificate sign(X509v3CertificateBuilder builder, PrivateKey issuerKey) throws Exception {
        return new JcaX509CertificateConverter().getCertificate(builder.build(new JcaContentSignerBuilder(SIGNATURE).build(issuerKey)));
    }

    /** Random (so that two runs' certificates do not share one) and positive, as RFC 5280 asks. */
    private static BigInteger serial() {
        return new BigInteger(64, new SecureRandom()).add(BigInteger.ONE);
    }

    private static void store(KeyStore store, Path path) throws Exception {
        try (OutputStream out = Files.newOutputStream(path)) {
            store.store(out, PASSWORD.toCharArray());
        }
    }
}
