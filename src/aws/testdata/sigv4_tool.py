#!/usr/bin/python3
"""An independent SigV4 implementation for cloister's tests: botocore's signer (Debian's
python3-botocore), never cloister's own code.

  sigv4_tool.py sign     < {"creds": {...}, "region": "us-east-1"}   -> requests signed with creds
  sigv4_tool.py verify   < {"creds": {...}, "requests": [...]}       -> {"results": [...]}
  sigv4_tool.py serve --creds FILE --cert C --key K --port-file F    -> HTTPS upstream that accepts
      only requests whose SigV4 signature (header, presigned query, or streaming chunk chain)
      verifies with creds; answers STS GetCallerIdentity and a minimal S3 (PUT/GET, multipart).
      Credential vending: STS GetSessionToken/AssumeRole mint new credentials (accepted from then
      on) and ECR GetAuthorizationToken mints a registry password checked by GET /v2/ on
      123456789012.dkr.ecr.eu-west-1.amazonaws.com; every minted value is appended to
      <LOG>.minted (JSON lines) so tests can look for it where it must not be.

creds: {"access_key_id", "secret", "token" (optional)}.
request: {"method", "target", "headers": [[name, value], ...], "body_b64"}.
"""
import base64
import hashlib
import hmac
import json
import sys
from urllib.parse import urlsplit, parse_qsl

from botocore.auth import SigV4Auth, S3SigV4Auth, SigV4QueryAuth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

STREAMING = 'STREAMING-AWS4-HMAC-SHA256-PAYLOAD'
EMPTY_SHA256 = hashlib.sha256(b'').hexdigest()


def _creds(c):
    return Credentials(c['access_key_id'], c['secret'], c.get('token') or None)


def _header(headers, name):
    for n, v in headers:
        if n.lower() == name:
            return v
    return None


def _req_json(method, target, headers, body):
    return {'method': method, 'target': target, 'headers': [[k, v] for k, v in headers],
            'body_b64': base64.b64encode(body).decode()}


def _signed(req, host):
    parts = urlsplit(req.url)
    target = parts.path or '/'
    if parts.query:
        target += '?' + parts.query
    headers = [('Host', host)] + [(k, v) for k, v in req.headers.items()]
    body = req.body or b''
    if isinstance(body, str):
        body = body.encode()
    if body and not any(k.lower() == 'content-length' for k, _ in headers):
        headers.append(('Content-Length', str(len(body))))  # as it goes on the wire
    return method_of(req), target, headers, body


def method_of(req):
    return req.method


def sign_all(cfg):
    creds = _creds(cfg['creds'])
    region = cfg.get('region', 'us-east-1')
    out = []

    def add(auth_cls, service, method, host, target, headers=None, body=b'', **kw):
        req = AWSRequest(method=method, url='https://%s%s' % (host, target), headers=headers or {},
                         data=body)
        auth_cls(creds, service, region, **kw).add_auth(req)
        m, t, h, b = _signed(req, host)
        out.append(_req_json(m, t, h, b))

    sts = 'sts.%s.amazonaws.com' % region
    add(SigV4Auth, 'sts', 'POST', sts, '/',
        {'Content-Type': 'application/x-www-form-urlencoded; charset=utf-8'},
        b'Action=GetCallerIdentity&Version=2011-06-15')
    add(SigV4Auth, 'ec2', 'GET', 'ec2.%s.amazonaws.com' % region,
        '/?Action=DescribeInstances&Filter.1.Name=tag%3AName&Filter.1.Value.1=a%20b%2Fc&Version=2016-11-15')
    bucket = 'cloister-test.s3.%s.amazonaws.com' % region
    add(S3SigV4Auth, 's3', 'PUT', bucket, '/dir%20one/file%2Bplus.txt', {}, b'hello s3\n')
    add(S3SigV4Auth, 's3', 'GET', bucket, '/dir%20one/file%2Bplus.txt?list-type=2&prefix=a%2Fb')
    add(S3SigV4QueryAuth, 's3', 'GET', bucket, '/presigned/object.bin', expires=3600)

    # Streaming chunked upload: seed signature by botocore, chunk chain per the S3 documentation.
    data = bytes((i * 7) & 0xff for i in range(200000))
    chunk = 65536
    sizes = [len(data[i:i + chunk]) for i in range(0, len(data), chunk)]
    enc_len = sum(len('%x;chunk-signature=' % s) + 64 + 2 + s + 2 for s in sizes) + len('0;chunk-signature=') + 64 + 4
    headers = {'Content-Encoding': 'aws-chunked', 'X-Amz-Content-SHA256': STREAMING,
               'X-Amz-Decoded-Content-Length': str(len(data)), 'Content-Length': str(enc_len)}
    req = AWSRequest(method='PUT', url='https://%s/streamed/object.bin' % bucket, headers=headers)
    SigV4Auth(creds, 's3', region).add_auth(req)
    m, t, h, _ = _signed(req, bucket)
    seed = req.headers['Authorization'].rsplit('Signature=', 1)[1]
    amz_date = req.headers['X-Amz-Date']
    key = _signing_key(creds.secret_key, amz_date[:8], region, 's3')
    scope = '%s/%s/s3/aws4_request' % (amz_date[:8], region)
    body = _chunked(data, chunk, key, amz_date, scope, seed)
    assert len(body) == enc_len
    out.append(_req_json(m, t, h, body))
    return out


def _signing_key(secret, date, region, service):
    k = ('AWS4' + secret).encode()
    for part in (date, region, service, 'aws4_request'):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return k


def _chunk_sig(key, amz_date, scope, prev, data):
    sts = '\n'.join(['AWS4-HMAC-SHA256-PAYLOAD', amz_date, scope, prev, EMPTY_SHA256,
                     hashlib.sha256(data).hexdigest()])
    return hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()


def _chunked(data, chunk, key, amz_date, scope, seed):
    out, prev = b'', seed
    pieces = [data[i:i + chunk] for i in range(0, len(data), chunk)] + [b'']
    for p in pieces:
        prev = _chunk_sig(key, amz_date, scope, prev, p)
        out += ('%x;chunk-signature=%s\r\n' % (len(p), prev)).encode() + p + b'\r\n'
    return out


def _dechunk(body, key, amz_date, scope, seed):
    """Verifies the chunk chain with `key`; returns the decoded data or raises ValueError."""
    out, prev, pos = b'', seed, 0
    while True:
        nl = body.index(b'\r\n', pos)
        size_s, _, ext = body[pos:nl].decode().partition(';')
        if not ext.startswith('chunk-signature='):
            raise ValueError('chunk without signature')
        size = int(size_s, 16)
        data = body[nl + 2:nl + 2 + size]
        if body[nl + 2 + size:nl + 4 + size] != b'\r\n':
            raise ValueError('bad chunk framing')
        want = _chunk_sig(key, amz_date, scope, prev, data)
        if not hmac.compare_digest(want, ext[len('chunk-signature='):]):
            raise ValueError('chunk signature mismatch')
        prev, pos = want, nl + 4 + size
        out += data
        if size == 0:
            if pos != len(body):
                raise ValueError('bytes after final chunk')
            return out


def verify(method, target, headers, body, cfg):
    """Returns (ok, reason, decoded_body). Uses botocore's signer with the given (real) creds."""
    creds = _creds(cfg)
    host = _header(headers, 'host')
    if not host:
        return False, 'no host', None
    url = 'https://%s%s' % (host, target)
    authz = _header(headers, 'authorization')
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    if authz:
        if not authz.startswith('AWS4-HMAC-SHA256 '):
            return False, 'not sigv4', None
        fields = dict(p.strip().split('=', 1) for p in authz[len('AWS4-HMAC-SHA256 '):].split(','))
        akid, date, region, service, _ = fields['Credential'].split('/')
        signed = fields['SignedHeaders'].split(';')
        got = fields['Signature']
        amz_date = _header(headers, 'x-amz-date')
        token = _header(headers, 'x-amz-security-token')
        req = AWSRequest(method=method, url=url, data=body)
        cls = S3SigV4Auth if service == 's3' else SigV4Auth
    elif 'X-Amz-Signature' in query:
        akid, date, region, service, _ = query['X-Amz-Credential'].split('/')
        signed = query['X-Amz-SignedHeaders'].split(';')
        got = query['X-Amz-Signature']
        amz_date = query['X-Amz-Date']
        token = query.get('X-Amz-Security-Token')
        kept = '&'.join(p for p in parts.query.split('&') if not p.startswith('X-Amz-Signature='))
        req = AWSRequest(method=method, url='https://%s%s?%s' % (host, parts.path, kept), data=body)
        cls = S3SigV4QueryAuth if service == 's3' else SigV4QueryAuth
    else:
        return False, 'unsigned', None
    if akid != cfg['access_key_id']:
        minted = cfg.get('minted', {}).get(akid)
        if not minted:
            return False, 'unknown access key', None
        cfg = {'access_key_id': akid, 'secret': minted['secret'], 'token': minted['token']}
        creds = _creds(cfg)
    if (cfg.get('token') or None) != token:
        return False, 'bad session token', None
    for n, v in headers:
        if n.lower() in signed:
            if n in req.headers:
                req.headers[n] = req.headers[n] + ',' + v
            else:
                req.headers[n] = v
    auth = cls(creds, service, region) if not cls.__name__.endswith('QueryAuth') else cls(creds, service, region, expires=3600)
    req.context['timestamp'] = amz_date
    cr = auth.canonical_request(req)
    sts = auth.string_to_sign(req, cr)
    want = auth.signature(sts, req)
    if not hmac.compare_digest(want, got):
        return False, 'SignatureDoesNotMatch', None
    content_sha = _header(headers, 'x-amz-content-sha256')
    if content_sha == STREAMING:
        key = _signing_key(creds.secret_key, amz_date[:8], region, service)
        try:
            data = _dechunk(body, key, amz_date, '%s/%s/%s/aws4_request' % (date, region, service), got)
        except (ValueError, IndexError) as e:
            return False, 'chunk: %s' % e, None
        return True, 'ok', data
    if content_sha and content_sha not in ('UNSIGNED-PAYLOAD',) and content_sha != hashlib.sha256(body).hexdigest():
        return False, 'XAmzContentSHA256Mismatch', None
    return True, 'ok', body


class Upstream:
    """State of the fake AWS upstream: objects, multipart uploads, and a log of every verdict."""

    def __init__(self, creds, log_path):
        import threading
        self.creds = creds
        self.log_path = log_path
        self.lock = threading.Lock()
        self.objects = {}
        self.uploads = {}
        self.next_upload = 1
        self.ecr_passwords = set()

    def mint(self, kind):
        import secrets
        import string
        alnum = string.ascii_letters + string.digits
        if kind == 'ecr':
            value = {'kind': kind, 'password': 'eyJwYXlsb2Fk' + ''.join(secrets.choice(alnum) for _ in range(300))}
        else:
            value = {'kind': kind,
                     'access_key_id': 'ASIA' + ''.join(secrets.choice(string.ascii_uppercase + '234567') for _ in range(16)),
                     'secret': ''.join(secrets.choice(alnum + '/+') for _ in range(40)),
                     'token': 'IQoJb3JpZ2luX2Vj' + ''.join(secrets.choice(alnum + '/+') for _ in range(400)) + '=='}
            self.creds.setdefault('minted', {})[value['access_key_id']] = value
        with self.lock, open(self.log_path + '.minted', 'a') as f:
            f.write(json.dumps(value) + '\n')
        if kind == 'ecr':
            self.ecr_passwords.add(value['password'])
        return value

    def log(self, entry):
        with self.lock, open(self.log_path, 'a') as f:
            f.write(json.dumps(entry) + '\n')


def _xml(body):
    return ('<?xml version="1.0" encoding="UTF-8"?>\n' + body).encode()


def make_handler(up):
    from http.server import BaseHTTPRequestHandler

    class Handler(BaseHTTPRequestHandler):
        protocol_version = 'HTTP/1.1'

        def log_message(self, *args):
            pass

        def _send(self, code, body=b'', headers=None):
            self.send_response(code)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
            if self.command != 'HEAD':
                self.wfile.write(body)

        def _body(self):
            if self.headers.get('Transfer-Encoding', '').lower() == 'chunked':
                out = b''
                while True:
                    size = int(self.rfile.readline().split(b';')[0], 16)
                    if size == 0:
                        while self.rfile.readline() not in (b'\r\n', b'\n', b''):
                            pass
                        return out
                    out += self.rfile.read(size)
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get('Content-Length') or 0))

        def _handle(self):
            body = self._body()
            headers = list(self.headers.items())
            host = (_header(headers, 'host') or '').split(':')[0]
            if host.endswith('.dkr.ecr.eu-west-1.amazonaws.com'):
                # The registry: Basic AWS:<password>, as docker sends it.
                authz = _header(headers, 'authorization') or ''
                try:
                    user, _, pw = base64.b64decode(authz[len('Basic '):]).decode().partition(':')
                except Exception:
                    user, pw = '', ''
                ok = authz.startswith('Basic ') and user == 'AWS' and pw in up.ecr_passwords
                up.log({'method': self.command, 'path': self.path, 'ok': ok, 'reason': 'registry',
                        'streaming': False, 'bytes': 0, 'leaked': 0, 'host': host, 'query': '',
                        'presigned': False, 'akid': ''})
                return self._send(200 if ok else 401, b'{}', {'Content-Type': 'application/json'})
            ok, reason, data = verify(self.command, self.path, headers, body, up.creds)
            streaming = _header(headers, 'x-amz-content-sha256') == STREAMING
            # Strings that must never arrive (the placeholders): anywhere in the request line,
            # the headers or the body.
            raw = (self.requestline + '\n' + ''.join('%s: %s\n' % hv for hv in headers)).encode() + body
            forbidden = list(up.creds.get('forbidden', []))
            try:  # placeholders the test learnt later (the guest's copies of minted credentials)
                forbidden += [l for l in open(up.log_path + '.forbidden').read().split('\n') if l]
            except OSError:
                pass
            leaked = [s for s in forbidden if s.encode() in raw]
            authz = _header(headers, 'authorization') or ''
            akid = authz.split('Credential=')[1].split('/')[0] if 'Credential=' in authz else ''
            up.log({'method': self.command, 'path': self.path.split('?')[0], 'ok': ok, 'reason': reason,
                    'streaming': streaming, 'bytes': len(data or b''), 'leaked': len(leaked),
                    'host': (_header(headers, 'host') or ''), 'query': urlsplit(self.path).query[:200],
                    'presigned': 'X-Amz-Signature=' in urlsplit(self.path).query, 'akid': akid})
            if not ok:
                code = 'SignatureDoesNotMatch' if 'Signature' in reason or 'chunk' in reason else 'InvalidClientTokenId'
                err = '<Error><Code>%s</Code><Message>%s</Message></Error>' % (code, reason)
                if self.command == 'POST' and b'Action=' in body:
                    err = '<ErrorResponse>%s<RequestId>1</RequestId></ErrorResponse>' % err
                return self._send(403, _xml(err), {'Content-Type': 'text/xml'})
            url = urlsplit(self.path)
            q = dict(parse_qsl(url.query, keep_blank_values=True))
            form = dict(parse_qsl((data or b'').decode(errors='replace'), keep_blank_values=True))
            action = form.get('Action') or q.get('Action')
            if host.startswith('sts.') and action in ('GetSessionToken', 'AssumeRole'):
                m = up.mint('sts:' + action)
                import datetime
                exp = (datetime.datetime.utcnow() + datetime.timedelta(hours=1)).strftime('%Y-%m-%dT%H:%M:%SZ')
                extra = ('<AssumedRoleUser><Arn>arn:aws:sts::123456789012:assumed-role/dev/s</Arn>'
                         '<AssumedRoleId>AROACLOISTER:s</AssumedRoleId></AssumedRoleUser>') if action == 'AssumeRole' else ''
                return self._send(200, _xml(
                    '<%sResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><%sResult>'
                    '<Credentials><AccessKeyId>%s</AccessKeyId><SecretAccessKey>%s</SecretAccessKey>'
                    '<SessionToken>%s</SessionToken><Expiration>%s</Expiration></Credentials>%s'
                    '</%sResult><ResponseMetadata><RequestId>2</RequestId></ResponseMetadata></%sResponse>'
                    % (action, action, m['access_key_id'], m['secret'], m['token'], exp, extra, action, action)),
                    {'Content-Type': 'text/xml'})
            if host.startswith('api.ecr.') and (_header(headers, 'x-amz-target') or '').endswith('.GetAuthorizationToken'):
                import time
                m = up.mint('ecr')
                return self._send(200, json.dumps({'authorizationData': [{
                    'authorizationToken': base64.b64encode(('AWS:' + m['password']).encode()).decode(),
                    'expiresAt': time.time() + 43200,
                    'proxyEndpoint': 'https://123456789012.dkr.ecr.eu-west-1.amazonaws.com'}]}).encode(),
                    {'Content-Type': 'application/x-amz-json-1.1'})
            if host.startswith('sts.') or (self.command == 'POST' and b'GetCallerIdentity' in (data or b'')):
                return self._send(200, _xml(
                    '<GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
                    '<GetCallerIdentityResult><Arn>arn:aws:iam::123456789012:user/cloister-test</Arn>'
                    '<UserId>AIDACLOISTERTEST</UserId><Account>123456789012</Account>'
                    '</GetCallerIdentityResult><ResponseMetadata><RequestId>1</RequestId>'
                    '</ResponseMetadata></GetCallerIdentityResponse>'), {'Content-Type': 'text/xml'})
            # S3, path style or virtual-hosted style.
            path = url.path
            if '.s3.' in host and not host.startswith('s3.'):
                key = host.split('.s3.')[0] + path
            else:
                key = path.lstrip('/')
                key = key if '/' in key else key + '/'
            key = key.lstrip('/')
            if self.command == 'POST' and 'uploads' in q:
                uid = 'upload%d' % up.next_upload
                up.next_upload += 1
                up.uploads[uid] = {}
                bucket, _, obj = key.partition('/')
                return self._send(200, _xml('<InitiateMultipartUploadResult><Bucket>%s</Bucket><Key>%s</Key>'
                                            '<UploadId>%s</UploadId></InitiateMultipartUploadResult>' % (bucket, obj, uid)))
            if self.command == 'PUT' and 'uploadId' in q:
                up.uploads[q['uploadId']][int(q['partNumber'])] = data
                return self._send(200, b'', {'ETag': '"%s"' % hashlib.md5(data).hexdigest()})
            if self.command == 'POST' and 'uploadId' in q:
                parts = up.uploads.pop(q['uploadId'])
                up.objects[key] = b''.join(parts[n] for n in sorted(parts))
                bucket, _, obj = key.partition('/')
                return self._send(200, _xml('<CompleteMultipartUploadResult><Bucket>%s</Bucket><Key>%s</Key>'
                                            '<ETag>"%s-%d"</ETag></CompleteMultipartUploadResult>' %
                                            (bucket, obj, hashlib.md5(up.objects[key]).hexdigest(), len(parts))))
            if self.command == 'PUT':
                up.objects[key] = data
                return self._send(200, b'', {'ETag': '"%s"' % hashlib.md5(data).hexdigest()})
            if self.command in ('GET', 'HEAD'):
                if key not in up.objects:
                    return self._send(404, _xml('<Error><Code>NoSuchKey</Code></Error>'))
                obj = up.objects[key]
                hdrs = {'ETag': '"%s"' % hashlib.md5(obj).hexdigest(), 'Accept-Ranges': 'bytes',
                        'Last-Modified': 'Mon, 30 Nov 2026 10:00:00 GMT',
                        'Content-Type': 'application/octet-stream'}
                rng = _header(headers, 'range')
                if rng and rng.startswith('bytes='):
                    first, _, last = rng[len('bytes='):].partition('-')
                    first, last = int(first), min(int(last or len(obj) - 1), len(obj) - 1)
                    hdrs['Content-Range'] = 'bytes %d-%d/%d' % (first, last, len(obj))
                    return self._send(206, obj[first:last + 1], hdrs)
                return self._send(200, obj, hdrs)
            return self._send(400, _xml('<Error><Code>NotImplemented</Code></Error>'))

        do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle

    return Handler


def serve(argv):
    """serve CREDS_JSON LOG PORT_FILE PID_FILE [CERTDIR]: daemonises once listening."""
    import os
    import ssl
    from http.server import ThreadingHTTPServer
    creds = json.load(open(argv[0]))
    up = Upstream(creds, argv[1])
    srv = ThreadingHTTPServer(('127.0.0.1', 0), make_handler(up))
    srv.daemon_threads = True
    if len(argv) > 4:
        # CERTDIR: <host>.pem per host name (chosen by SNI) and one key.pem.
        import os.path
        certdir = argv[4]
        contexts = {}
        for name in sorted(os.listdir(certdir)):
            if name.endswith('.pem') and name != 'key.pem':
                c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                c.load_cert_chain(os.path.join(certdir, name), os.path.join(certdir, 'key.pem'))
                contexts[name[:-len('.pem')]] = c
        ctx = next(iter(contexts.values()))

        def pick(sock, server_name, _ctx):
            if server_name in contexts:
                sock.context = contexts[server_name]
        ctx.sni_callback = pick
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    ready_r, ready_w = os.pipe()
    if os.fork() > 0:
        os.close(ready_w)
        os.read(ready_r, 1)  # returns once the child is listening and has written its files
        os._exit(0)
    os.close(ready_r)
    os.setsid()
    with open(argv[3] + '.tmp', 'w') as f:
        f.write(str(os.getpid()))
    os.rename(argv[3] + '.tmp', argv[3])
    with open(argv[2] + '.tmp', 'w') as f:
        f.write(str(srv.server_address[1]))
    os.rename(argv[2] + '.tmp', argv[2])
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.write(ready_w, b'1')
    os.close(ready_w)
    srv.serve_forever()


def put_streaming(argv):
    """put-streaming HOST[:PORT] BUCKET/KEY SIZE [PROXY CAFILE] < creds: sends one aws-chunked upload
    (64 KiB chunks, signed with creds) over plain HTTP, or over HTTPS through PROXY (CONNECT) trusting
    CAFILE; prints the status code."""
    import http.client
    creds = _creds(json.load(sys.stdin))
    host, path, size = argv[0], '/' + argv[1], int(argv[2])
    data = bytes((i * 31 + 7) & 0xff for i in range(size))
    chunk = 65536
    sizes = [len(data[i:i + chunk]) for i in range(0, len(data), chunk)]
    enc_len = sum(len('%x;chunk-signature=' % n) + 64 + 2 + n + 2 for n in sizes) + len('0;chunk-signature=') + 64 + 4
    headers = {'Content-Encoding': 'aws-chunked', 'X-Amz-Content-SHA256': STREAMING,
               'X-Amz-Decoded-Content-Length': str(len(data)), 'Content-Length': str(enc_len)}
    region = 'eu-west-1' if '.eu-west-1.' in host else 'us-east-1'
    req = AWSRequest(method='PUT', url='http://%s%s' % (host, path), headers=headers)
    SigV4Auth(creds, 's3', region).add_auth(req)
    seed = req.headers['Authorization'].rsplit('Signature=', 1)[1]
    amz_date = req.headers['X-Amz-Date']
    key = _signing_key(creds.secret_key, amz_date[:8], region, 's3')
    body = _chunked(data, chunk, key, amz_date, '%s/%s/s3/aws4_request' % (amz_date[:8], region), seed)
    if len(argv) > 4:  # through an HTTPS proxy: CONNECT host:443, TLS trusting the proxy's CA
        import ssl
        phost, _, pport = argv[3].partition(':')
        conn = http.client.HTTPSConnection(phost, int(pport), timeout=60,
                                           context=ssl.create_default_context(cafile=argv[4]))
        conn.set_tunnel(host, 443)
    else:
        conn = http.client.HTTPConnection(host, timeout=60)
    conn.putrequest('PUT', path, skip_host=True, skip_accept_encoding=True)
    conn.putheader('Host', host)
    for k, v in req.headers.items():
        conn.putheader(k, v)
    conn.endheaders()
    for i in range(0, len(body), 10000):  # stream it in pieces
        conn.send(body[i:i + 10000])
    resp = conn.getresponse()
    print(resp.status, hashlib.sha256(data).hexdigest())
    resp.read()


def main():
    cmd = sys.argv[1]
    if cmd == 'put-streaming':
        return put_streaming(sys.argv[2:])
    if cmd == 'serve':
        return serve(sys.argv[2:])
    if cmd == 'sign':
        print(json.dumps({'requests': sign_all(json.load(sys.stdin))}))
    elif cmd == 'verify':
        cfg = json.load(sys.stdin)
        results = []
        for r in cfg['requests']:
            ok, reason, _ = verify(r['method'], r['target'], r['headers'],
                                   base64.b64decode(r['body_b64']), cfg['creds'])
            results.append({'ok': ok, 'reason': reason})
        print(json.dumps({'results': results}))
    else:
        sys.exit('unknown command ' + cmd)


if __name__ == '__main__':
    main()
