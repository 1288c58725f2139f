# syntax=docker/dockerfile:1
# The Kiln gateway and `kiln worker`, one image: `docker run <image>` serves, `docker run <image> worker`
# runs workers only, and any other argument is a `kiln` subcommand (`keys list`, `migrate`, …).
#
# linux/amd64 only: ffmpeg and ffprobe come from @ffmpeg-installer/linux-x64 and
# @ffprobe-installer/linux-x64, regular dependencies that npm refuses to install on another CPU.
# On an arm64 host Docker runs the image under emulation.

FROM --platform=linux/amd64 node:20-bookworm-slim AS build
WORKDIR /app

# Dependencies first, so a source change reuses this layer. Install scripts run only for the
# packages package.json's allowScripts allows (npm 10 in this image does not read that field):
# better-sqlite3 fetches its native binding, the ffmpeg/ffprobe packages mark their binaries
# executable. sharp needs no script: its prebuilt binary and libvips come as @img/* packages.
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts \
 && npm rebuild better-sqlite3 @ffmpeg-installer/linux-x64 @ffprobe-installer/linux-x64

# The server (tsc into dist/) and the web console (esbuild into dist/public/console), then drop the
# dev dependencies the build needed.
COPY tsconfig.json tsconfig.build.json ./
COPY console ./console
COPY src ./src
RUN npm run build \
 && npm prune --omit=dev --ignore-scripts

FROM --platform=linux/amd64 node:20-bookworm-slim AS runtime
WORKDIR /app

# Listen on every interface of the container; keep the store's SQLite file (when no store URL is
# set), admin.key and produced files on the volume.
ENV NODE_ENV=production \
    KILN_HOST=0.0.0.0 \
    KILN_PORT=8080 \
    KILN_DATA_DIR=/var/lib/kiln

# Root owns the application, so the process cannot change it; it writes only to the data directory.
COPY --from=build /app/package.json /app/package-lock.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY bin ./bin
COPY workflows ./workflows
RUN mkdir -p /var/lib/kiln \
 && chown node:node /var/lib/kiln \
 && ln -s /app/bin/kiln.js /usr/local/bin/kiln

# The image's unprivileged `node` user, by number so a runtime can verify it is not root.
USER 1000:1000

# Fail the build, not the first job, when a native piece cannot run as this user.
RUN node_modules/@ffmpeg-installer/linux-x64/ffmpeg -version >/dev/null \
 && node_modules/@ffprobe-installer/linux-x64/ffprobe -version >/dev/null \
 && node -e "require('sharp'); new (require('better-sqlite3'))(':memory:').close()" \
 && kiln --version

VOLUME /var/lib/kiln
EXPOSE 8080

# /readyz answers 200 once the store does. Slim images have no curl; Node 20 has fetch.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.KILN_PORT || 8080) + '/readyz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]

ENTRYPOINT ["node", "--no-memory-reducer", "--max-semi-space-size=16", "/app/bin/kiln.js"]
CMD ["serve"]
